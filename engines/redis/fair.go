package redis

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/orthrus-go/orthrus/locker/driver"
	"github.com/orthrus-go/orthrus/locker/inspect"
	goredis "github.com/redis/go-redis/v9"
)

// FairEviction bounds how long a waiter of a fair engine (WithFair) whose
// process died, or stopped answering, holds up the waiters behind it: its
// place in the queue expires fairLifetime after its process last refreshed
// it, and another process waiting for the name notices within
// fairRefreshEvery after that.
const FairEviction = 5 * time.Second

const (
	// fairRefreshEvery is how often a process refreshes the places of its
	// waiters, and looks for expired places in the queues it waits in.
	fairRefreshEvery = time.Second
	// fairLifetime is how long a place lasts without a refresh: it leaves
	// room for one refresh period and a half, so that an eviction is
	// noticed within FairEviction, and survives a stall of the process of
	// more than two refresh periods.
	fairLifetime = FairEviction - 3*fairRefreshEvery/2
)

// WithFair makes every mutex of the engine fair: strict first come, first
// served across processes, as Redisson's RFairLock. Waiters queue on Redis
// next to the lock; only the first in line may take it, TryLock gets it
// only when nobody waits, and a release wakes the first waiter's process
// alone. A waiter that gives up leaves the queue at once; one whose process
// dies is evicted within FairEviction. Read-write locks and semaphores
// queue in either mode.
//
// WithFair is also what enables weights (locker.WithWeight): a fair engine
// ranks the waiters of its mutexes, read-write locks and semaphores
// heaviest first, then by arrival (see Weights in doc.go); an engine
// without it refuses a weight above 1 with an error wrapping
// errors.ErrUnsupported, as its mutex does not queue.
//
// Fairness is the engine's, not one Locker's: every contender of a name
// must follow the queue, so give every engine that shares a prefix the same
// setting (an engine without it still excludes, but does not queue). It
// costs a few more commands per script, an attempt per arrival where the
// default mode queues a process's own waiters locally, and, while this
// process waits, one pipeline per second refreshing its places.
// Default: off (a released lock goes to whichever waiter asks first).
func WithFair() Option {
	return func(s *settings) error {
		s.fair = true
		return nil
	}
}

// Fair reports whether the engine's mutexes are fair (WithFair).
func (e *Engine) Fair() bool { return e.fq != nil }

var _ driver.Weigher = (*Engine)(nil)

// Weighs implements driver.Weigher: a fair engine ranks the waiters of
// its mutexes, read-write locks and semaphores by weight
// (locker.WithWeight); without WithFair a mutex does not queue, so the
// engine refuses a weight above 1 (see Weights in doc.go), saying so.
func (e *Engine) Weighs() error {
	if e.fq == nil {
		return errNotFair
	}
	return nil
}

var errNotFair = errors.New("a redis engine ranks waiters by weight only when fair (redis.WithFair, config fair: true): without it a mutex does not queue")

var (
	fairAcquireScript = newScript("fence", "clock", "rank", "fair", "fair_acquire")
	fairReleaseScript = newScript("clock", "fair", "fair_release")
	fairForceScript   = newScript("clock", "fair", "fair_force")
	fairLeaveScript   = newScript("clock", "fair", "fair_leave")
	fairRefreshScript = newScript("clock", "fair", "fair_refresh")
)

// fairKeys are the keys of the fair mutex whose lock key is lock: the
// lock, the queue and the expiries of its places.
func fairKeys(lock string) [3]string {
	q := lock + ":queue"
	return [3]string{lock, q, q + ":exp"}
}

// fairHold is a mutex hold of a fair engine: the mutex's lock and counter,
// and the waiter's place in the queue.
type fairHold struct {
	hold
	fence, queue, exp string
	member            string // the waiter's entry "<ticket>:<owner>", once it has a ticket
	// The acquire script's arguments until granted, then the release
	// script's; args[:n] are used.
	args [14]any
	n    int
}

func (e *Engine) newFairHold(h *driver.Hold, wait bool) *fairHold {
	lock, fence := e.mutexKeys(h.Name)
	k := fairKeys(lock)
	f := &fairHold{hold: newHold(h, lock, h.Life()), fence: fence, queue: k[1], exp: k[2]}
	register := any("0") // "1" when the caller will wait
	if wait {
		register = "1"
	}
	f.args, f.n = [14]any{"evalsha", &fairAcquireScript.sha, "4", &f.lock, &f.fence, &f.queue, &f.exp,
		&f.owner, &f.ttl, &e.idle, &f.ticket, register, &e.fq.lifetime, weight(h, wait)}, 14
	return f
}

// attempt: the first answer that gives the waiter a ticket puts it in the
// engine's refreshes.
func (f *fairHold) attempt(ctx context.Context, e *Engine) (int64, error) {
	v, err := evalsha(ctx, e.client, fairAcquireScript, goredis.NewCmd, f.args[:f.n]).Result()
	if err != nil {
		return 0, err
	}
	r, ticket, err := attemptReply(v)
	if err == nil && f.member == "" && ticket > 0 {
		f.ticket, f.member = ticket, member(uint64(ticket), 0, f.owner)
		e.fq.add(f)
	}
	return r, err
}

func (f *fairHold) granted(e *Engine, token int64) {
	f.token = uint64(token)
	if f.member != "" {
		e.fq.remove(f)
	}
	f.args, f.n = [14]any{"evalsha", &fairReleaseScript.sha, "3", &f.lock, &f.queue, &f.exp,
		&f.token, &f.owner, &e.numsub, &e.publish}, 10
}

func (f *fairHold) release(ctx context.Context, e *Engine) (int64, error) {
	return e.batch.release(ctx, fairReleaseScript, f.args[:f.n])
}

func (f *fairHold) renewal() (*string, any) { return &f.lock, "s" }

// withdraw takes a waiter that gave up out of the queue.
func (f *fairHold) withdraw(ctx context.Context, e *Engine) {
	e.fq.remove(f)
	args := []any{"evalsha", &fairLeaveScript.sha, "3", &f.lock, &f.queue, &f.exp, &f.member, &e.numsub, &e.publish}
	if _, err := e.batch.run(ctx, fairLeaveScript, args); err != nil {
		e.log.Warn("redis: leaving the fair queue failed; the place expires on its own", "name", f.name, "err", err, "within", FairEviction)
	}
}

// fairQueue is a fair engine's record of the waiters of this process that
// hold a place in a queue, which it refreshes every fairRefreshEvery, one
// script per name, in one pipeline. No goroutine runs between refreshes: a
// timer starts each, and is armed only while some waiter is queued.
type fairQueue struct {
	e        *Engine
	lifetime int64 // ms, pointed to from the argument lists

	mu      sync.Mutex
	closed  bool
	names   map[string]*queued // by lock key
	timer   *time.Timer        // nil until the first waiter queues
	armed   bool
	running sync.WaitGroup // a refresh under way
}

// queued are the waiters of this process in the queue of one name.
type queued struct {
	keys    [3]string // fairKeys
	waiters map[*fairHold]struct{}
}

func newFairQueue(e *Engine) *fairQueue {
	return &fairQueue{e: e, names: make(map[string]*queued), lifetime: fairLifetime.Milliseconds()}
}

func (q *fairQueue) add(f *fairHold) {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := q.names[f.lock]
	if n == nil {
		n = &queued{keys: fairKeys(f.lock), waiters: make(map[*fairHold]struct{})}
		q.names[f.lock] = n
	}
	n.waiters[f] = struct{}{}
	switch {
	case q.closed || q.armed:
	case q.timer == nil:
		q.timer, q.armed = time.AfterFunc(fairRefreshEvery, q.refresh), true
	default:
		q.timer.Reset(fairRefreshEvery)
		q.armed = true
	}
}

func (q *fairQueue) remove(f *fairHold) {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := q.names[f.lock]
	if n == nil {
		return
	}
	delete(n.waiters, f)
	if len(n.waiters) == 0 {
		delete(q.names, f.lock)
	}
}

// refresh runs on the timer: it refreshes every queued waiter's place and
// wakes those that were evicted (their process stalled past their
// lifetime), so that they queue again, at their own place.
func (q *fairQueue) refresh() {
	q.mu.Lock()
	if q.closed || len(q.names) == 0 {
		q.armed = false
		q.mu.Unlock()
		return
	}
	q.running.Add(1)
	defer q.running.Done()
	ctx, cancel := context.WithTimeout(context.Background(), fairRefreshEvery)
	defer cancel()
	keys := make([]string, 0, len(q.names))
	cmds := make([]*goredis.StringSliceCmd, 0, len(q.names))
	for key, n := range q.names {
		args := []any{"evalsha", &fairRefreshScript.sha, "3", n.keys[0], n.keys[1], n.keys[2], q.lifetime, q.e.numsub, q.e.publish}
		for f := range n.waiters {
			args = append(args, f.member)
		}
		keys, cmds = append(keys, key), append(cmds, goredis.NewStringSliceCmd(ctx, args...))
	}
	q.mu.Unlock()

	evalshaAll(ctx, q.e.client, fairRefreshScript, goredis.NewStringSliceCmd, cmds)
	var errs []error
	for i, cmd := range cmds {
		gone, err := cmd.Result()
		if err != nil {
			errs = append(errs, err)
		}
		q.e.hub.wakeQueued(keys[i], q.evicted(keys[i], gone))
	}
	if err := errors.Join(errs...); err != nil {
		q.e.log.Warn("redis: refreshing the places of fair waiters failed", "err", err)
	}

	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed || len(q.names) == 0 {
		q.armed = false
		return
	}
	q.timer.Reset(fairRefreshEvery)
}

// evicted returns the tickets of the members, gone from the queue of the
// lock key, whose waiters are still registered: not granted meanwhile.
func (q *fairQueue) evicted(key string, members []string) []int64 {
	if len(members) == 0 {
		return nil
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	n := q.names[key]
	if n == nil {
		return nil
	}
	var tickets []int64
	for f := range n.waiters {
		if slices.Contains(members, f.member) {
			tickets = append(tickets, f.ticket)
		}
	}
	return tickets
}

// close stops the refreshes and waits for one under way. The places of
// waiters still queued expire on their own.
func (q *fairQueue) close() {
	q.mu.Lock()
	q.closed = true
	if q.timer != nil {
		q.timer.Stop()
	}
	q.mu.Unlock()
	q.running.Wait()
}

// mayHaveMissed tells whether a waiter joining c with want must try again
// because a message since the mark m may have been meant for it, called
// with the hub's mutex held. A family waiter must after any message (see
// hub.join), a fair one only after a message naming its ticket that found
// no waiter here, or after more messages than c remembers.
func (h *hub) mayHaveMissed(c *channel, want interest, m mark) bool {
	heard := h.heard.Load() - m.heard
	switch {
	case heard == 0 || c == nil:
		return false
	case want.kind != inspect.KindMutex:
		return true
	case want.ticket == 0:
		return false
	}
	return heard > uint64(len(c.missed.tickets)) || c.missed.has(want.ticket)
}

// missedTickets are the latest tickets named by fair wake-ups that found
// no waiter of this process: a waiter of this process whose ticket it is
// had not joined yet, or it waits in another process.
type missedTickets struct {
	tickets [16]int64
	next    int
}

func (m *missedTickets) add(t int64) {
	m.tickets[m.next] = t
	m.next = (m.next + 1) % len(m.tickets)
}

func (m *missedTickets) has(t int64) bool { return slices.Contains(m.tickets[:], t) }

// wakeTicket wakes the waiter of c with ticket n (a channel serves one
// queue), called with the hub's mutex held.
func wakeTicket(c *channel, n int64) {
	for w := c.head; w != nil; w = w.next {
		if w.want.ticket == n {
			wake(w)
			return
		}
	}
	c.missed.add(n)
}

// wakeQueued wakes the fair waiters of this process on the lock key whose
// tickets are given.
func (h *hub) wakeQueued(key string, tickets []int64) {
	if len(tickets) == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.channels[key]
	if c == nil {
		return
	}
	for _, t := range tickets {
		wakeTicket(c, t)
	}
}
