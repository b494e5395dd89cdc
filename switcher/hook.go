package switcher

import (
	"context"
	"fmt"
	"sync"

	"github.com/orthrus-go/orthrus/locker"
)

// hookQueue carries the events from the switching goroutines to the
// OnSwitch hook, which runs on a goroutine of its own so that a slow hook
// never delays a switch; WaitEvents waits on it for the hook to catch up.
type hookQueue struct {
	events  chan Event
	stopped chan struct{} // closed when the deliverer has returned (Close)

	mu        sync.Mutex
	queued    uint64        // events put in the queue
	delivered uint64        // events the hook has returned from (or, without a hook, taken)
	progress  chan struct{} // closed, and replaced, at each delivery
}

// hookQueueLen is how many events may wait for a slow hook before new ones
// are dropped (and a WARN says so).
const hookQueueLen = 64

func newHookQueue() hookQueue {
	return hookQueue{events: make(chan Event, hookQueueLen), progress: make(chan struct{}), stopped: make(chan struct{})}
}

func (s *Switcher) emit(ev Event) {
	q := &s.hook
	q.mu.Lock()
	select {
	case q.events <- ev:
		q.queued++ // under q.mu with the send: delivered never runs ahead of it
		q.mu.Unlock()
	default:
		q.mu.Unlock()
		s.log.Warn("switcher: OnSwitch hook is behind; event dropped", "from", ev.From, "to", ev.To, "reason", ev.Reason)
	}
}

// deliver calls the OnSwitch hook in order, off the switching goroutine.
func (s *Switcher) deliver(ctx context.Context) {
	defer s.wg.Done()
	q := &s.hook
	defer close(q.stopped)
	for {
		select {
		case <-ctx.Done():
			return
		case ev := <-q.events:
			if s.opts.onSwitch != nil {
				s.opts.onSwitch(ev)
			}
			q.mu.Lock()
			q.delivered++
			close(q.progress)
			q.progress = make(chan struct{})
			q.mu.Unlock()
		}
	}
}

// WaitEvents returns once the OnSwitch hook has returned from every event
// emitted before the call: the hook runs on a goroutine of the switcher,
// after the switch that emitted the event has returned, so a test or a
// shutdown that needs the hook's effects waits for them here. It returns
// ctx.Err() when ctx ends first, and an error wrapping locker.ErrClosed
// when Close stopped the delivery with events still undelivered (Close
// does not wait for the queue). Events dropped because the hook fell 64
// behind are not waited for.
func (s *Switcher) WaitEvents(ctx context.Context) error {
	q := &s.hook
	stopped := false
	q.mu.Lock()
	defer q.mu.Unlock()
	target := q.queued
	for q.delivered < target {
		if stopped {
			return fmt.Errorf("switcher: WaitEvents: %w: %d events were never delivered", locker.ErrClosed, target-q.delivered)
		}
		progress := q.progress
		q.mu.Unlock()
		select {
		case <-progress:
		case <-q.stopped:
			stopped = true // look once more: the last delivery may have made it
		case <-ctx.Done():
			q.mu.Lock()
			return ctx.Err()
		}
		q.mu.Lock()
	}
	return nil
}
