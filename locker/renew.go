package locker

import (
	"container/heap"
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"
)

// scheduler is the one renewal loop of an engine. Renewed holds fall due
// every TTL/3; a hold may be renewed up to half an interval early, so that
// holds falling due close together share one Renew call (one round trip
// for Redis). Fixed leases fall due when they end.
type scheduler struct {
	renewer Renewer // nil when the engine keeps holds alive itself
	expire  func(*Hold)
	log     *slog.Logger

	mu    sync.Mutex
	queue holdHeap
	next  time.Time // when the loop wakes up next
	wake  chan struct{}
	stop  chan struct{}
	done  chan struct{}
}

func newScheduler(r Renewer, expire func(*Hold), log *slog.Logger) *scheduler {
	s := &scheduler{
		renewer: r,
		expire:  expire,
		log:     log,
		wake:    make(chan struct{}, 1),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	go s.run()
	return s
}

func interval(h *Hold) time.Duration { return h.TTL / 3 }

// retryDelay is how soon a failed renewal is tried again: often enough to
// get several tries in before the deadline, rarely enough not to hammer a
// struggling server.
func retryDelay(h *Hold) time.Duration {
	return min(max(interval(h)/4, 10*time.Millisecond), time.Second)
}

// add schedules h, granted at now.
func (s *scheduler) add(h *Hold, now time.Time) {
	if !h.Renew {
		h.due = now.Add(h.TTL)
	} else if s.renewer != nil {
		h.due = now.Add(interval(h))
		h.deadline = now.Add(h.TTL)
	} else {
		return // the engine keeps it alive and reports its loss
	}
	s.mu.Lock()
	heap.Push(&s.queue, h)
	// Only a hold due before the loop's next wake-up needs to wake it: on
	// the Lock/Unlock hot path that is almost never.
	early := h.due.Before(s.next)
	s.mu.Unlock()
	if early {
		s.poke()
	}
}

// remove stops scheduling h; a renewal in flight for it is ignored.
func (s *scheduler) remove(h *Hold) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h.stopped = true
	if h.index >= 0 {
		heap.Remove(&s.queue, h.index)
	}
}

func (s *scheduler) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *scheduler) close() {
	close(s.stop)
	<-s.done
}

func (s *scheduler) run() {
	defer close(s.done)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		s.mu.Lock()
		s.next = time.Now().Add(time.Hour)
		if len(s.queue) > 0 {
			s.next = s.queue[0].due
		}
		timer.Reset(time.Until(s.next))
		s.mu.Unlock()
		select {
		case <-s.stop:
			return
		case <-s.wake:
			continue
		case <-timer.C:
		}
		renew, expired := s.takeDue(time.Now())
		for _, h := range expired {
			s.expire(h)
		}
		if len(renew) > 0 {
			s.renew(renew)
		}
	}
}

// takeDue pops the holds that are due, and those renewable early enough to
// join them.
func (s *scheduler) takeDue(now time.Time) (renew, expired []*Hold) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.queue) > 0 {
		h := s.queue[0]
		early := h.due
		if h.Renew {
			early = h.due.Add(-interval(h) / 2)
		}
		if early.After(now) {
			break
		}
		heap.Pop(&s.queue)
		if h.Renew {
			renew = append(renew, h)
		} else {
			expired = append(expired, h)
		}
	}
	return renew, expired
}

func (s *scheduler) renew(holds []*Hold) {
	start := time.Now()
	// The call may take no longer than the tightest deadline in the batch:
	// past it the hold is lost whatever the answer.
	deadline := holds[0].deadline
	for _, h := range holds[1:] {
		if h.deadline.Before(deadline) {
			deadline = h.deadline
		}
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	results := s.renewer.Renew(ctx, holds)
	cancel()

	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	for i, h := range holds {
		if h.stopped {
			continue
		}
		var err error
		if i < len(results) {
			err = results[i]
		}
		h.renewed(err)
		switch {
		case err == nil:
			h.due = start.Add(interval(h))
			h.deadline = start.Add(h.TTL)
		case errors.Is(err, ErrLockLost) || !now.Before(h.deadline):
			s.log.Warn("locker: hold lost", "name", h.Name, "owner", h.Owner, "token", h.Token, "err", err)
			h.markLost(lostCause(err))
			continue
		default:
			s.log.Debug("locker: renewal failed, will retry", "name", h.Name, "err", err)
			h.due = now.Add(min(retryDelay(h), h.deadline.Sub(now)))
		}
		heap.Push(&s.queue, h)
	}
}

// holdHeap orders holds by due time.
type holdHeap []*Hold

func (q holdHeap) Len() int           { return len(q) }
func (q holdHeap) Less(i, j int) bool { return q[i].due.Before(q[j].due) }
func (q holdHeap) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].index, q[j].index = i, j
}
func (q *holdHeap) Push(x any) {
	h := x.(*Hold)
	h.index = len(*q)
	*q = append(*q, h)
}
func (q *holdHeap) Pop() any {
	old := *q
	h := old[len(old)-1]
	old[len(old)-1] = nil
	h.index = -1
	*q = old[:len(old)-1]
	return h
}
