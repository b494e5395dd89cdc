package driver

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/observe"
)

// Renewal runs in bounded chunks on a few workers, so that its cost per
// call does not grow with the number of holds: 100k holds are ~800 calls
// of 128, each small enough not to sit long in front of an acquisition on
// a shared server, and a slow or failed call holds up only its own chunk.
// Chunks taken early (holds ready but not yet due) go one at a time, so
// that an acquisition finds at most one chunk ahead of it on the server;
// chunks of holds that are due go on every worker at once.
const (
	// renewChunk bounds the holds of one Renew call: a Redis script that
	// takes well under a millisecond, and no more than the operations
	// etcd allows in one transaction (--max-txn-ops), should a Renewer use
	// one.
	renewChunk = 128
	// lateChunk bounds the holds of one Renew call when renewal is late:
	// fewer, larger calls then catch up at less cost per hold.
	lateChunk = 8 * renewChunk
	// renewWorkers bounds the Renew calls in flight at once.
	renewWorkers = 4
	// behindEvery rate-limits the warning that renewal is late.
	behindEvery = 5 * time.Second
)

// scheduler is the one renewal machinery of an engine. Renewed holds fall
// due every TTL/3; a hold may be renewed up to half an interval early, so
// that holds falling due close together share one Renew call. Fixed leases
// fall due when they end. Workers take the holds due, earliest first, at
// most chunk at a time: a chunk's deadline is its own holds' earliest.
type scheduler struct {
	renewer Renewer // nil when the engine keeps holds alive itself
	expire  func(*Hold)
	log     *slog.Logger
	chunk   int

	// ctx ends the Renew calls in flight when the scheduler closes.
	ctx    context.Context
	cancel context.CancelFunc

	// base is the origin of the due times in queue.
	base time.Time

	mu     sync.Mutex
	queue  holdHeap
	busy   int       // chunks in flight
	stale  int       // removed holds still in queue
	next   time.Time // when the idle workers wake up next
	warned time.Time // the latest warning that renewal is late
	wake   chan struct{}
	stop   chan struct{}
	wg     sync.WaitGroup
}

func newScheduler(r Renewer, expire func(*Hold), log *slog.Logger) *scheduler {
	return startScheduler(r, expire, log, renewChunk, renewWorkers)
}

func startScheduler(r Renewer, expire func(*Hold), log *slog.Logger, chunk, workers int) *scheduler {
	s := &scheduler{
		renewer: r,
		expire:  expire,
		log:     log,
		chunk:   chunk,
		base:    time.Now(),
		wake:    make(chan struct{}, 1),
		stop:    make(chan struct{}),
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.wg.Add(workers)
	for range workers {
		go s.work()
	}
	return s
}

func interval(h *Hold) time.Duration { return h.TTL / 3 }

// retryDelay is how soon a renewal that failed failures times in a row is
// tried again: an eighth of an interval, doubling with each failure up to
// half an interval. A server back within a second (a leader election, a
// Sentinel failover) is found at once; one that stays down costs about
// seven tries per TTL, not a retry as soon as the last one failed.
func retryDelay(h *Hold, failures int) time.Duration {
	return max(interval(h)/8, time.Millisecond) << min(failures-1, 2)
}

// ready is when a worker may take h: its due time, or a quarter of an
// interval before it for a renewal, so that holds falling due close
// together share a call. A retry waits for its due time: taken early, it
// would go again as soon as it failed.
func ready(h *Hold) time.Time {
	if h.Renew && h.failures == 0 {
		return h.due.Add(-interval(h) / 4)
	}
	return h.due
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
	s.push(h)
	// Only a hold due before the workers wake up needs to wake one: on the
	// Lock/Unlock hot path that is almost never.
	early := h.due.Before(s.next)
	s.mu.Unlock()
	if early {
		s.poke()
	}
}

// remove stops scheduling h; a renewal in flight for it is ignored. It
// stays in the queue until it falls due, and is dropped then: removing it
// now would cost a search on the Unlock path. Once removed holds are half
// the queue, the queue is rebuilt without them, so that they do not pile
// up (a long fixed lease released early would stay until its end).
func (s *scheduler) remove(h *Hold) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h.stopped = true
	if !h.queued {
		return
	}
	s.stale++
	if s.stale < minCompact || 2*s.stale < len(s.queue) {
		return
	}
	live := s.queue[:0]
	for _, e := range s.queue {
		if e.h.stopped {
			e.h.queued = false
			continue
		}
		live = append(live, e)
	}
	clear(s.queue[len(live):])
	s.queue, s.stale = live, 0
	heap.Init(&s.queue)
}

// minCompact is the least number of removed holds worth rebuilding the
// queue for.
const minCompact = 1024

// push queues h by its due time. Called with s.mu held.
//
// It appends and fixes the heap rather than call heap.Push, whose any
// argument would box the entry: an allocation on every Lock.
func (s *scheduler) push(h *Hold) {
	h.queued = true
	s.queue = append(s.queue, entry{due: h.due.Sub(s.base), h: h})
	heap.Fix(&s.queue, len(s.queue)-1)
}

// pop takes the earliest hold off the queue. Called with s.mu held.
func (s *scheduler) pop() *Hold {
	h := s.queue[0].h
	last := len(s.queue) - 1
	s.queue[0] = s.queue[last]
	s.queue[last] = entry{}
	s.queue = s.queue[:last]
	if last > 0 {
		heap.Fix(&s.queue, 0)
	}
	h.queued = false
	if h.stopped {
		s.stale--
	}
	return h
}

func (s *scheduler) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// close stops the workers, ending the Renew calls in flight.
func (s *scheduler) close() {
	close(s.stop)
	s.cancel()
	s.wg.Wait()
}

// work takes chunks of due holds until close. Every idle worker sleeps
// until the earliest hold is due; the first to wake takes it, the others
// find nothing and sleep again.
func (s *scheduler) work() {
	defer s.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		renew, expired, next := s.take(time.Now())
		for _, h := range expired {
			s.expire(h)
		}
		if len(renew) > 0 {
			s.renew(renew)
			s.mu.Lock()
			s.busy--
			s.mu.Unlock()
			s.poke() // a worker held back by this chunk may go
		}
		if len(renew) == 0 && len(expired) == 0 {
			timer.Reset(time.Until(next))
			select {
			case <-s.stop:
				return
			case <-s.wake:
			case <-timer.C:
			}
			continue
		}
		select {
		case <-s.stop:
			return
		default:
		}
	}
}

// take pops up to a chunk of the holds that are ready, earliest due first,
// and says when the workers should look again. Holds ready but not yet
// due are taken only while no other chunk is in flight. When the earliest
// is past its due time, renewal is late: the chunk may be eight times as
// large.
func (s *scheduler) take(now time.Time) (renew, expired []*Hold, next time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	limit := s.chunk
	if len(s.queue) > 0 && s.queue[0].due < now.Sub(s.base) {
		limit *= lateChunk / renewChunk
	}
	for len(s.queue) > 0 && len(renew)+len(expired) < limit {
		h := s.queue[0].h
		if h.stopped {
			s.pop()
			continue
		}
		// An early renewal waits while another chunk is in flight.
		early := renew == nil && h.Renew && s.busy > 0 && h.due.After(now)
		if ready(h).After(now) || early {
			break
		}
		s.pop()
		if !h.Renew {
			expired = append(expired, h)
			continue
		}
		if renew == nil {
			s.checkLag(h, now)
			renew = make([]*Hold, 0, min(limit, len(s.queue)+1))
			s.busy++
		}
		renew = append(renew, h)
	}
	s.next = now.Add(time.Hour)
	if len(s.queue) > 0 {
		// The head's due time, not the time it is ready: by then the
		// holds due within a quarter of an interval after it are ready
		// too, and share its call.
		s.next = s.queue[0].h.due
	}
	return renew, expired, s.next
}

// checkLag warns, at most every behindEvery, when the earliest hold of a
// chunk is taken more than half an interval past its due time: renewal is
// falling behind, and holds will be lost at their deadline unless it
// catches up. Called with s.mu held.
func (s *scheduler) checkLag(h *Hold, now time.Time) {
	lag := now.Sub(h.due)
	if lag <= interval(h)/2 || now.Sub(s.warned) < behindEvery {
		return
	}
	s.warned = now
	backlog := 1
	for _, q := range s.queue {
		if !q.h.stopped && !ready(q.h).After(now) {
			backlog++
		}
	}
	s.log.Warn("locker: renewal is falling behind",
		"lag", lag, "left", h.deadline.Sub(now), "backlog", backlog, "holds", len(s.queue)+1)
}

// renew renews one chunk and schedules each hold again, or marks it lost.
func (s *scheduler) renew(holds []*Hold) {
	start := time.Now()
	// The call may take no longer than the tightest deadline in the chunk:
	// past it the hold is lost whatever the answer. Nor longer than an
	// interval: a call stuck that long is given up and tried again, and
	// its worker goes back to the other chunks.
	deadline, limit := holds[0].deadline, interval(holds[0])
	for _, h := range holds[1:] {
		if h.deadline.Before(deadline) {
			deadline = h.deadline
		}
		limit = min(limit, interval(h))
	}
	if d := start.Add(limit); d.Before(deadline) {
		deadline = d
	}
	ctx, cancel := context.WithDeadline(s.ctx, deadline)
	// A call that outlives its deadline (a client that ignores it on a
	// frozen server) puts its holds at risk then, and loses them at their
	// own deadlines, not whenever it returns.
	returned, watched := make(chan struct{}), make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(watched)
		s.watchUnanswered(ctx, holds, returned)
	})
	results := s.renewer.Renew(ctx, holds)
	close(returned)
	if !stop() {
		<-watched
	}
	cancel()

	var lost []*Hold
	var lostErr error
	s.mu.Lock()
	now := time.Now()
	for i, h := range holds {
		if h.stopped || h.isLost() { // lost while the call was unanswered
			continue
		}
		var err error
		if i < len(results) {
			err = results[i]
		}
		h.renewed(err)
		switch {
		case err == nil:
			h.failures, h.risky = 0, false
			h.due = start.Add(interval(h))
			h.deadline = start.Add(h.TTL)
		case errors.Is(err, locker.ErrLockLost) || !now.Before(h.deadline):
			h.markLost(lostCause(err))
			if lost == nil {
				lostErr = err
			}
			lost = append(lost, h)
			continue
		default:
			h.failures++
			s.atRisk(h, now, err)
			s.log.Debug("locker: renewal failed, will retry", "name", h.Name, "failures", h.failures, "err", err)
			h.due = now.Add(min(retryDelay(h, h.failures), h.deadline.Sub(now)))
		}
		s.push(h)
	}
	s.mu.Unlock()
	WarnLost(s.log, "locker", lost, lostErr)
}

// atRisk reports h at risk after a renewal failed with err at now, once
// per streak of failures. Called with s.mu held.
func (s *scheduler) atRisk(h *Hold, now time.Time, err error) {
	if h.risky || h.stopped || !now.Before(h.deadline) {
		return
	}
	h.risky = true
	h.MarkAtRisk(h.deadline.Sub(now), err)
}

// watchUnanswered runs when the Renew call of holds reaches its deadline
// (ctx's) unanswered: it reports them at risk, then loses each at its
// deadline unless the call returns first (returned closes).
func (s *scheduler) watchUnanswered(ctx context.Context, holds []*Hold, returned <-chan struct{}) {
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return // the scheduler is closing
	}
	err := fmt.Errorf("%w: renewal unanswered", locker.ErrUnavailable)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		next := s.unanswered(holds, err)
		if next.IsZero() {
			return
		}
		timer.Reset(time.Until(next))
		select {
		case <-timer.C:
		case <-returned:
			return
		}
	}
}

// unanswered reports at risk the holds of a Renew call still unanswered,
// and loses those past their deadline. It returns the earliest deadline of
// those still alive; zero when none is.
func (s *scheduler) unanswered(holds []*Hold, err error) (next time.Time) {
	var lost []*Hold
	s.mu.Lock()
	now := time.Now()
	for _, h := range holds {
		switch {
		case h.stopped || h.isLost():
		case now.Before(h.deadline):
			s.atRisk(h, now, err)
			if next.IsZero() || h.deadline.Before(next) {
				next = h.deadline
			}
		default:
			h.markLost(observe.LostExpired)
			lost = append(lost, h)
		}
	}
	s.mu.Unlock()
	WarnLost(s.log, "locker", lost, err)
	return next
}

// WarnLost logs the holds lost together, for one cause: one line for a
// hold, and one line for many, not one per hold, since a mass loss must be
// loud and not drown the log. who names the component that saw the loss.
func WarnLost(log *slog.Logger, who string, lost []*Hold, cause error) {
	switch {
	case len(lost) == 1:
		h := lost[0]
		log.Warn(who+": hold lost", "name", h.Name, "owner", h.Owner, "token", h.Token, "err", cause)
	case len(lost) > 1:
		log.Warn(who+": holds lost", "count", len(lost), "first", lost[0].Name, "err", cause)
	}
}

// entry is a hold in the queue, with its due time as an offset from the
// scheduler's base: comparing entries reads no Hold, which matters with
// 100k of them.
type entry struct {
	due time.Duration
	h   *Hold
}

// holdHeap orders holds by due time.
type holdHeap []entry

func (q holdHeap) Len() int           { return len(q) }
func (q holdHeap) Less(i, j int) bool { return q[i].due < q[j].due }
func (q holdHeap) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }

// Push and Pop complete heap.Interface for heap.Init and heap.Fix; push
// and pop above do their work without boxing.
func (q *holdHeap) Push(x any) { *q = append(*q, x.(entry)) }
func (q *holdHeap) Pop() any {
	old := *q
	e := old[len(old)-1]
	old[len(old)-1] = entry{}
	*q = old[:len(old)-1]
	return e
}
