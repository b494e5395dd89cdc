package redis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/inspect"
)

// confirmTimeout bounds the wait for a subscription to be confirmed. Past
// it the waiter goes on with its expiry timer alone: a server that does not
// confirm will fail the next attempt anyway.
const confirmTimeout = 5 * time.Second

// hub multiplexes every waiter of an engine over one pub/sub connection (one
// per master on Cluster, with sharded pub/sub); a channel is subscribed
// while it has waiters. A release message wakes one waiter of the channel,
// the longest waiting (see Algorithm in doc.go), which is sure to try: a
// wake-up is never lost (see waiter.wake).
type hub struct {
	client  goredis.UniversalClient
	cluster *goredis.ClusterClient // nil unless Cluster
	log     *slog.Logger
	waiters sync.Pool // of *waiter

	mu       sync.Mutex
	closed   bool
	conns    map[string]*subConn // by node address; "" when not Cluster
	channels map[string]*channel // by lock key
	// confirms counts first confirmations of a subscription; a channel
	// records the count it got (see join).
	confirms atomic.Uint64
	// heard counts the wake-up messages received: a family waiter that
	// joins after one came in tries again (see join).
	heard atomic.Uint64
	stop  chan struct{} // closed by close
	wg    sync.WaitGroup
}

type subConn struct {
	ps      *goredis.PubSub
	sharded bool
	addr    string // the node's; "" when not Cluster
}

func (c *subConn) subscribe(ctx context.Context, ch string) error {
	if c.sharded {
		return c.ps.SSubscribe(ctx, ch)
	}
	return c.ps.Subscribe(ctx, ch)
}

func (c *subConn) unsubscribe(ctx context.Context, ch string) error {
	if c.sharded {
		return c.ps.SUnsubscribe(ctx, ch)
	}
	return c.ps.Unsubscribe(ctx, ch)
}

// channel is one subscribed release channel and its waiters, oldest first.
type channel struct {
	key        string // the lock's
	name       string // the channel's: key + channelSuffix
	conn       *subConn
	head, tail *waiter
	confirmed  chan struct{} // closed when the server confirmed the subscription
	confirm    uint64        // the hub's confirms once confirmed; 0 before
	missed     missedTickets // fair wake-ups that found no waiter here
}

// waiter is one Acquire waiting for a release. Pooled: its channel and
// timer serve many waits.
type waiter struct {
	ch         *channel
	prev, next *waiter
	// wake is buffered: a wake-up sent while the waiter is between two
	// attempts makes it try once more rather than being lost.
	wake  chan struct{}
	timer *time.Timer // the expiry fallback, owned by the waiting Acquire
	want  interest    // what the waiter waits for (see wakeFor)
}

// interest is what a waiter of the hub waits for: the wake-up messages of
// the read-write lock, the semaphore and a fair engine's mutex say who may
// proceed.
type interest struct {
	kind    inspect.Kind
	permits int
	// ticket: a reader may go before writers with a higher one; a fair
	// waiter goes when a release names it.
	ticket int64
}

func newHub(client goredis.UniversalClient, log *slog.Logger) *hub {
	cluster, _ := client.(*goredis.ClusterClient)
	h := &hub{
		client:   client,
		cluster:  cluster,
		log:      log,
		conns:    make(map[string]*subConn),
		channels: make(map[string]*channel),
		stop:     make(chan struct{}),
	}
	h.waiters.New = func() any {
		t := time.NewTimer(time.Hour)
		t.Stop()
		return &waiter{wake: make(chan struct{}, 1), timer: t}
	}
	return h
}

// mark is what the hub had seen when a waiter made its attempt.
type mark struct{ confirms, heard uint64 }

// subscribed is a mark to take before an attempt and pass to join.
func (h *hub) subscribed() mark { return mark{h.confirms.Load(), h.heard.Load()} }

// queued reports whether waiters of this process queue for the lock key.
func (h *hub) queued(key string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.channels[key]
	return c != nil && c.head != nil
}

// join registers a waiter on the channel of the lock key and returns once the server has confirmed
// the subscription, so a release published after join returns is seen. It
// reports whether the caller must try again before it waits: unless the
// subscription was confirmed before the mark (h.subscribed) taken before
// the caller's last attempt, a release may have come in between unseen,
// and, since releases publish only to a channel with subscribers, not even
// published.
//
// A family waiter also tries again when a message came in since the mark:
// a release's message wakes only the waiters it lets proceed, and one
// handled before the waiter joined would be lost to it.
func (h *hub) join(ctx context.Context, key string, m mark, want interest) (w *waiter, retry bool, err error) {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil, false, fmt.Errorf("subscribe %q: %w", key+channelSuffix, locker.ErrClosed)
	}
	c := h.channels[key]
	retry = c == nil || c.confirm == 0 || c.confirm > m.confirms || h.mayHaveMissed(c, want, m)
	if c == nil {
		ch := key + channelSuffix
		// Not the caller's context: its deadline would become the shared
		// connection's, and a write cut short there breaks the connection
		// for every waiter.
		sctx, cancel := context.WithTimeout(context.Background(), confirmTimeout)
		conn, err := h.connFor(sctx, ch)
		if err == nil {
			err = conn.subscribe(sctx, ch)
		}
		cancel()
		if err != nil {
			h.mu.Unlock()
			return nil, false, &locker.EngineError{Engine: "redis", Op: "subscribe", Name: ch, Classes: unavailable(err), Err: err}
		}
		c = &channel{key: key, name: ch, conn: conn, confirmed: make(chan struct{})}
		h.channels[key] = c
	}
	w = h.waiters.Get().(*waiter)
	select {
	case <-w.wake: // left over from its last wait
	default:
	}
	w.ch, w.prev, w.want = c, c.tail, want
	if c.tail != nil {
		c.tail.next = w
	} else {
		c.head = w
	}
	c.tail = w
	h.mu.Unlock()

	w.timer.Reset(confirmTimeout)
	select {
	case <-c.confirmed:
	case <-w.timer.C:
		h.log.Warn("redis: subscription not confirmed, waiting on expiry alone", "channel", c.name)
	case <-ctx.Done():
		h.leave(w, false)
		// Redis had not confirmed the subscription.
		return nil, false, &locker.EngineError{Engine: "redis", Op: "subscribe", Name: c.name, Classes: unavailable(ctx.Err()), Err: ctx.Err()}
	}
	w.timer.Stop()
	return w, retry, nil
}

// leave unregisters w, wakes the next waiter unless w acquired the lock,
// and unsubscribes the channel when w was the last.
func (h *hub) leave(w *waiter, acquired bool) {
	w.timer.Stop()
	h.mu.Lock()
	defer h.mu.Unlock()
	c := w.ch
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		c.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		c.tail = w.prev
	}
	w.ch, w.prev, w.next = nil, nil, nil
	h.waiters.Put(w)
	if c.head != nil {
		if !acquired {
			wake(c.head)
		}
		return
	}
	if h.channels[c.key] != c {
		return
	}
	delete(h.channels, c.key)
	if h.closed {
		return
	}
	// Under h.mu, so that a new subscription of the same channel goes on
	// the wire after this unsubscription.
	ctx, cancel := context.WithTimeout(context.Background(), confirmTimeout)
	defer cancel()
	if err := c.conn.unsubscribe(ctx, c.name); err != nil {
		h.log.Debug("redis: unsubscribe failed", "channel", c.name, "err", err)
	}
}

// connFor returns the pub/sub connection that serves ch, starting it if
// needed. Called with h.mu held.
func (h *hub) connFor(ctx context.Context, ch string) (*subConn, error) {
	addr, node := "", goredis.UniversalClient(h.client)
	if h.cluster != nil {
		master, err := h.cluster.MasterForKey(ctx, ch)
		if err != nil {
			return nil, err
		}
		addr, node = master.Options().Addr, master
	}
	if c := h.conns[addr]; c != nil {
		return c, nil
	}
	c := &subConn{sharded: h.cluster != nil, addr: addr}
	if c.sharded {
		c.ps = node.SSubscribe(context.Background())
	} else {
		c.ps = node.Subscribe(context.Background())
	}
	h.conns[addr] = c
	h.wg.Add(1)
	go h.receive(c)
	return c, nil
}

// receive dispatches the messages of one connection until it is closed.
func (h *hub) receive(c *subConn) {
	defer h.wg.Done()
	for {
		msg, err := c.ps.Receive(context.Background())
		if err != nil {
			if h.isClosed() {
				return
			}
			// go-redis reconnects and resubscribes on the next Receive;
			// releases published meanwhile are lost, so every waiter of this
			// connection tries again now.
			h.wakeConn(c)
			if !h.pause(100 * time.Millisecond) {
				return
			}
			continue
		}
		switch m := msg.(type) {
		case *goredis.Message:
			h.wakeChannel(m.Channel, m.Payload)
		case *goredis.Subscription:
			switch m.Kind {
			case "subscribe", "ssubscribe":
				h.confirm(m.Channel)
			case "sunsubscribe":
				h.dropped(c, m.Channel)
			}
		}
	}
}

// pause waits d unless the hub closes first; it reports whether to go on.
func (h *hub) pause(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-h.stop:
		return false
	}
}

func (h *hub) isClosed() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.closed
}

// confirm marks ch subscribed. A confirmation of a channel already
// confirmed follows a reconnect: its waiters may have missed a release.
func (h *hub) confirm(ch string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.channels[strings.TrimSuffix(ch, channelSuffix)]
	if c == nil {
		return
	}
	select {
	case <-c.confirmed:
		wakeAll(c)
	default:
		close(c.confirmed)
		c.confirm = h.confirms.Add(1)
	}
}

// wakeChannel wakes the waiters of ch that the release message msg lets
// proceed (see wakeFor).
func (h *hub) wakeChannel(ch, msg string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.heard.Add(1)
	if c := h.channels[strings.TrimSuffix(ch, channelSuffix)]; c != nil && c.head != nil {
		wakeFor(c, msg)
	}
}

// wakeFor wakes the waiters of c that a release's message lets proceed,
// called with the hub's mutex held:
//
//   - "1": a mutex was released: the longest waiting tries.
//   - "q<ticket>": a fair mutex was released: the waiter with that ticket.
//   - "w<ticket>": a writer left (or gave up waiting). Readers go, those
//     with a ticket below the first waiting writer's (all when "w0");
//     when no reader of this process may, one writer tries.
//   - "r": the last reader left: one writer tries.
//   - "p<free>": permits were released: the waiters whose permits fit in
//     free, first come first.
//
// Each process does the same with its own waiters, so a release wakes
// about as many as can proceed in each process, never all.
func wakeFor(c *channel, msg string) {
	if msg == "" {
		wakeAll(c)
		return
	}
	n, _ := strconv.ParseInt(msg[1:], 10, 64)
	switch msg[0] {
	case '1':
		wake(c.head)
	case 'q':
		wakeTicket(c, n)
	case 'w':
		woke := false
		for w := c.head; w != nil; w = w.next {
			if w.want.kind == inspect.KindRead && (n == 0 || w.want.ticket == 0 || w.want.ticket < n) {
				wake(w)
				woke = true
			}
		}
		if !woke {
			wakeWriter(c)
		}
	case 'r':
		wakeWriter(c)
	case 'p':
		for w := c.head; w != nil && n > 0; w = w.next {
			if p := int64(w.want.permits); p <= n {
				wake(w)
				n -= p
			}
		}
	default:
		wakeAll(c)
	}
}

// wakeWriter wakes the longest waiting writer of c.
func wakeWriter(c *channel) {
	for w := c.head; w != nil; w = w.next {
		if w.want.kind == inspect.KindWrite {
			wake(w)
			return
		}
	}
}

func (h *hub) wakeConn(conn *subConn) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range h.channels {
		if c.conn == conn {
			wakeAll(c)
		}
	}
}

func wake(w *waiter) {
	select {
	case w.wake <- struct{}{}:
	default: // already woken: it will try once more
	}
}

func wakeAll(c *channel) {
	for w := c.head; w != nil; w = w.next {
		wake(w)
	}
}

// close ends every connection and waits for the receivers.
func (h *hub) close() error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil
	}
	h.closed = true
	close(h.stop)
	conns := h.conns
	h.conns = nil
	h.mu.Unlock()
	var errs []error
	for _, c := range conns {
		if err := c.ps.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	h.wg.Wait()
	return errors.Join(errs...)
}
