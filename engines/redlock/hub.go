package redlock

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/orthrus-go/orthrus/locker"
)

// confirmTimeout bounds the wait for a majority of the nodes to confirm a
// subscription. Past it the waiter goes on with its expiry timer alone.
const confirmTimeout = 5 * time.Second

// Pauses of a node's receiver after an error (the node is down), doubling.
const (
	receiveRetry    = 50 * time.Millisecond
	receiveRetryMax = time.Second
)

// hub holds one pub/sub connection per node, shared by every waiter of the
// engine: a release channel is subscribed on every node while this process
// has waiters for it, and a release message from any node gives one of
// them the turn to try again (see wake).
type hub struct {
	e    *Engine
	subs []*goredis.PubSub

	// mu orders the subscribe and unsubscribe commands of a channel, so
	// that every node ends subscribed exactly while the channel has
	// waiters.
	mu     sync.Mutex
	closed bool
	chans  map[string]*wchan // by channel

	stop chan struct{} // closed by close: the receivers end
	wg   sync.WaitGroup
}

// wchan is one subscribed channel and its waiters.
type wchan struct {
	// waiters in the order they get the turn: the one given it moves to
	// the end.
	waiters []*waiter
	// turn is the waiter given the turn to try again, from then until it
	// waits again or leaves (nil: none); pending, that a message came
	// meanwhile.
	turn      *waiter
	pending   bool
	confirmed []bool
	count     int           // nodes that confirmed
	ready     chan struct{} // closed once a majority confirmed
}

// waiter is one Acquire waiting for a release of its name.
type waiter struct {
	h       *hub
	channel string
	c       *wchan
	// wake holds a token exactly while the waiter has the turn and has not
	// taken it (buffered: a turn given during an attempt is kept).
	wake chan struct{}
}

func newHub(e *Engine) *hub {
	h := &hub{e: e, chans: make(map[string]*wchan), stop: make(chan struct{})}
	for i, c := range e.nodes {
		ps := c.Subscribe(context.Background()) // connects at the first subscription
		h.subs = append(h.subs, ps)
		h.wg.Add(1)
		go h.receive(i, ps)
	}
	return h
}

// receive reads node i's messages until close: confirmations and release
// messages. go-redis reconnects and subscribes again after an error.
func (h *hub) receive(i int, ps *goredis.PubSub) {
	defer h.wg.Done()
	pause, connected := receiveRetry, false
	for {
		var msg any
		var err error
		if !connected {
			err = h.connect(ps)
		}
		if err == nil {
			connected = true
			msg, err = ps.Receive(context.Background())
		}
		if err != nil {
			connected = false
			t := time.NewTimer(pause)
			select {
			case <-h.stop:
				t.Stop()
				return
			case <-t.C:
			}
			pause = min(2*pause, receiveRetryMax)
			continue
		}
		pause = receiveRetry
		switch m := msg.(type) {
		case *goredis.Subscription:
			if m.Kind == "subscribe" {
				h.confirm(i, m.Channel)
			}
		case *goredis.Message:
			h.wake(m.Channel)
		}
	}
}

// connect dials ps's connection within the node timeout: go-redis dials a subscription's connection under the lock that
// PubSub.Close takes, so a dial left to Receive (no deadline) to a frozen
// node held Close up for the client's read timeout.
func (h *hub) connect(ps *goredis.PubSub) error {
	ctx, cancel := context.WithTimeout(context.Background(), h.e.timeout)
	defer cancel()
	return ps.Ping(ctx)
}

func (h *hub) confirm(i int, channel string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.chans[channel]
	if c == nil || c.confirmed[i] {
		return
	}
	c.confirmed[i] = true
	if c.count++; c.count == h.e.quorum {
		close(c.ready)
	}
}

// wake gives the turn to try again to one waiter of channel, the one that
// had it least recently, or, while a waiter has it, notes the message for
// when that one waits again. A release (a message from each node that had
// the hold) thus sets one attempt of this process going, not one per
// waiter: those all raced each other, split the nodes between them and
// let go, each letting go publishing more messages.
func (h *hub) wake(channel string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if c := h.chans[channel]; c != nil {
		c.giveTurn()
	}
}

// giveTurn is wake's, with h.mu held.
func (c *wchan) giveTurn() {
	if c.turn != nil {
		c.pending = true
		return
	}
	if len(c.waiters) == 0 {
		return
	}
	w := c.waiters[0]
	copy(c.waiters, c.waiters[1:])
	c.waiters[len(c.waiters)-1] = w
	c.turn = w
	select {
	case w.wake <- struct{}{}:
	default: // cannot be: a token is there only while w has the turn
	}
}

// join registers a waiter on channel and returns once a majority of the
// nodes confirmed the subscription: every holder's release then publishes
// on a node that tells this process, since any two majorities share a node.
// The caller must try again before it waits: a release that came before
// was published to no one.
func (h *hub) join(ctx context.Context, name, channel string) (*waiter, error) {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil, fmt.Errorf("redlock: subscribe %q: %w", channel, locker.ErrClosed)
	}
	c := h.chans[channel]
	if c == nil {
		c = &wchan{confirmed: make([]bool, len(h.subs)), ready: make(chan struct{})}
		h.chans[channel] = c
		h.each(func(ctx context.Context, ps *goredis.PubSub) error { return ps.Subscribe(ctx, channel) })
	}
	w := &waiter{h: h, channel: channel, c: c, wake: make(chan struct{}, 1)}
	c.waiters = append(c.waiters, w)
	h.mu.Unlock()

	t := time.NewTimer(confirmTimeout)
	defer t.Stop()
	select {
	case <-c.ready:
	case <-t.C:
		h.e.log.Warn("redlock: a majority did not confirm the subscription, waiting on expiry alone", "channel", channel)
	case <-ctx.Done():
		h.leave(w, false)
		return nil, fmt.Errorf("redlock: acquire %q: subscribe: %w: %w", name, locker.ErrUnavailable, ctx.Err())
	}
	return w, nil
}

// each sends a command to every node's connection, each bounded by the
// node timeout; a node that is down gets it from go-redis when it
// reconnects. Called with h.mu held.
func (h *hub) each(cmd func(context.Context, *goredis.PubSub) error) {
	for i, ps := range h.subs {
		ctx, cancel := context.WithTimeout(context.Background(), h.e.timeout)
		if err := cmd(ctx, ps); err != nil {
			h.e.log.Debug("redlock: pub/sub command failed; sent again on reconnection", "node", i, "err", err)
		}
		cancel()
	}
}

// leave unregisters w, and unsubscribes its channel when it was the last.
// A waiter that leaves with the turn without a grant hands it on: the
// release that gave it may have left the name free.
func (h *hub) leave(w *waiter, granted bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := w.c
	c.waiters = slices.DeleteFunc(c.waiters, func(x *waiter) bool { return x == w })
	if c.turn == w {
		c.turn, c.pending = nil, false
		if !granted {
			c.giveTurn()
		}
	}
	if len(c.waiters) == 0 && h.chans[w.channel] == c {
		delete(h.chans, w.channel)
		if !h.closed {
			h.each(func(ctx context.Context, ps *goredis.PubSub) error { return ps.Unsubscribe(ctx, w.channel) })
		}
	}
}

// rest is called by a waiter about to wait again. It reports true when the
// waiter was given the turn while it tried (a message came meanwhile: it
// tries again at once); otherwise it gives back the turn it had, to the
// next waiter when a message came while it tried.
func (w *waiter) rest() bool {
	w.h.mu.Lock()
	defer w.h.mu.Unlock()
	c := w.c
	select {
	case <-w.wake:
		c.pending = false
		return true
	default:
	}
	if c.turn == w {
		c.turn = nil
		if c.pending {
			c.pending = false
			c.giveTurn()
		}
	}
	return false
}

// await waits for the turn to try again, or for d (the soonest expiry the
// last attempt saw), or until ctx is done, returning ctx.Err().
func (w *waiter) await(ctx context.Context, d time.Duration) error {
	if w.rest() {
		return nil
	}
	t := time.NewTimer(max(d, time.Millisecond))
	defer t.Stop()
	select {
	case <-w.wake:
	case <-t.C:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// close ends the subscriptions and the receivers.
func (h *hub) close() {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return
	}
	h.closed = true
	h.mu.Unlock()
	close(h.stop)
	for _, ps := range h.subs {
		_ = ps.Close()
	}
	h.wg.Wait()
}
