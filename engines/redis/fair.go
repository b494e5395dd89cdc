package redis

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/orthrus-go/orthrus/locker"
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

// Suffixes of a fair engine's queue keys, after the lock's.
const (
	queueSuffix = ":queue"
	expSuffix   = ":exp"
)

// WithFair makes every mutex of the engine fair: strict first come, first
// served across processes, as Redisson's RFairLock. Waiters queue on Redis
// next to the lock; only the first in line may take it, TryLock gets it
// only when nobody waits, and a release wakes the first waiter's process
// alone. A waiter that gives up leaves the queue at once; one whose process
// dies is evicted within FairEviction. Read-write locks and semaphores are
// not affected.
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

// fairHold is the engine's part of a fair mutex hold, beside hold. As in
// hold, the argument lists point to the fields.
type fairHold struct {
	queue, exp string
	register   string // "1" when the caller will wait
	// ticket is the waiter's place, set by the attempt that first finds
	// the lock taken (0 before); member is its entry "<ticket>:<owner>".
	ticket int64
	member string
	// abandoned: the caller left while a request was in flight; the
	// worker that runs it cleans up after it (see call.exec).
	abandoned bool
	// The acquire script's arguments until granted, then the release
	// script's; args[:n] are used.
	args [13]any
	n    int
}

// newFairHold readies a fair mutex hold.
func (e *Engine) newFairHold(h *locker.Hold, wait bool) *hold {
	st := e.newHold(h)
	q := e.fq
	f := &fairHold{queue: st.lock + queueSuffix, register: "0"}
	f.exp = f.queue + expSuffix
	if wait {
		f.register = "1"
	}
	f.args, f.n = [13]any{"evalsha", &q.shaAcquire, "4", &st.lock, &st.fence, &f.queue, &f.exp,
		&st.owner, &st.ttl, &e.idle, &f.ticket, &f.register, &q.lifetime}, 13
	st.fair = f
	return st
}

// acquireFair is Acquire for a fair mutex: it takes the waiter out of the
// queue when it leaves without the lock.
func (e *Engine) acquireFair(ctx context.Context, h *locker.Hold, wait bool) (bool, error) {
	st := e.newFairHold(h, wait)
	h.State = st
	ok, err := e.acquire(ctx, h, st, wait)
	if f := st.fair; !ok && !f.abandoned && f.member != "" {
		e.fq.remove(st)
		// In the background, as a cancelled wait must return at once;
		// here once the engine is closed.
		if !e.core.Go(func(bg context.Context) { e.unqueue(bg, st) }) {
			e.unqueue(context.Background(), st)
		}
	}
	return ok, err
}

// fairRequest runs the acquire script of a fair hold: the token, or minus
// the time to wait at most. The first answer that gives the waiter a
// ticket puts it in the engine's refreshes.
func (e *Engine) fairRequest(ctx context.Context, st *hold) (int64, error) {
	f := st.fair
	v, err := evalsha(ctx, e.client, fairAcquireScript, goredis.NewCmd, f.args[:f.n]).Result()
	if err != nil {
		return 0, err
	}
	r, ticket, err := attemptReply(v)
	if err == nil && f.member == "" && ticket > 0 {
		f.ticket, f.member = ticket, member(uint64(ticket), 0, st.owner)
		e.fq.add(st)
	}
	return r, err
}

// fairGranted records the token of a fair grant and readies its release.
func (e *Engine) fairGranted(st *hold, token int64) {
	f := st.fair
	st.token = uint64(token)
	if f.member != "" {
		e.fq.remove(st)
	}
	f.args, f.n = [13]any{"evalsha", &e.fq.shaRelease, "3", &st.lock, &f.queue, &f.exp,
		&st.token, &st.owner, &e.numsub, &e.publish}, 10
}

// unqueue takes a waiter that gave up out of the queue.
func (e *Engine) unqueue(bg context.Context, st *hold) {
	f := st.fair
	if f.member == "" {
		return
	}
	e.fq.remove(st)
	ctx, cancel := context.WithTimeout(bg, st.releaseAfter)
	defer cancel()
	args := []any{"evalsha", &e.fq.shaLeave, "3", &st.lock, &f.queue, &f.exp, &f.member, &e.numsub, &e.publish}
	if _, err := e.script(ctx, fairLeaveScript, args); err != nil {
		e.log.Warn("redis: leaving the fair queue failed; the place expires on its own", "name", st.name, "err", err, "within", FairEviction)
	}
}

// fairQueue is a fair engine's record of the waiters of this process that
// hold a place in a queue, which it refreshes every fairRefreshEvery, one
// script per name, in one pipeline. No goroutine runs between refreshes: a
// timer starts each, and is armed only while some waiter is queued.
type fairQueue struct {
	e *Engine
	// Script arguments pointed to from the argument lists.
	shaAcquire, shaRelease, shaLeave, shaRefresh string
	lifetime                                     int64 // ms

	mu      sync.Mutex
	closed  bool
	names   map[string]*queued // by lock key
	timer   *time.Timer        // nil until the first waiter queues
	armed   bool
	running sync.WaitGroup // a refresh under way
}

// queued are the waiters of this process in the queue of one name.
type queued struct {
	keys    []string // lock, queue, expiries
	waiters map[*hold]struct{}
}

func newFairQueue(e *Engine) *fairQueue {
	return &fairQueue{
		e: e, names: make(map[string]*queued), lifetime: fairLifetime.Milliseconds(),
		shaAcquire: fairAcquireScript.Hash(), shaRelease: fairReleaseScript.Hash(),
		shaLeave: fairLeaveScript.Hash(), shaRefresh: fairRefreshScript.Hash(),
	}
}

func (q *fairQueue) add(st *hold) {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := q.names[st.lock]
	if n == nil {
		n = &queued{keys: []string{st.lock, st.fair.queue, st.fair.exp}, waiters: make(map[*hold]struct{})}
		q.names[st.lock] = n
	}
	n.waiters[st] = struct{}{}
	switch {
	case q.closed || q.armed:
	case q.timer == nil:
		q.timer, q.armed = time.AfterFunc(fairRefreshEvery, q.refresh), true
	default:
		q.timer.Reset(fairRefreshEvery)
		q.armed = true
	}
}

func (q *fairQueue) remove(st *hold) {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := q.names[st.lock]
	if n == nil {
		return
	}
	delete(n.waiters, st)
	if len(n.waiters) == 0 {
		delete(q.names, st.lock)
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
	keys := make([]string, 0, len(q.names))
	cmds := make([][]any, 0, len(q.names))
	for key, n := range q.names {
		args := []any{"evalsha", q.shaRefresh, "3", n.keys[0], n.keys[1], n.keys[2], q.lifetime, q.e.numsub, q.e.publish}
		for st := range n.waiters {
			args = append(args, st.fair.member)
		}
		keys, cmds = append(keys, key), append(cmds, args)
	}
	q.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), fairRefreshEvery)
	gone, err := q.run(ctx, cmds)
	cancel()
	if err != nil {
		q.e.log.Warn("redis: refreshing the places of fair waiters failed", "err", err)
	}
	for i, members := range gone {
		q.e.hub.wakeQueued(keys[i], q.evicted(keys[i], members))
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
	for st := range n.waiters {
		if slices.Contains(members, st.fair.member) {
			tickets = append(tickets, st.fair.ticket)
		}
	}
	return tickets
}

// run sends the refresh scripts in one pipeline, loading the script
// once if the server lacks it, and returns the members each found gone.
func (q *fairQueue) run(ctx context.Context, cmds [][]any) ([][]string, error) {
	send := func() ([]*goredis.StringSliceCmd, error) {
		out := make([]*goredis.StringSliceCmd, len(cmds))
		_, err := q.e.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
			for i, args := range cmds {
				out[i] = goredis.NewStringSliceCmd(ctx, args...)
				_ = p.Process(ctx, out[i])
			}
			return nil
		})
		return out, err
	}
	out, err := send()
	if err != nil && goredis.HasErrorPrefix(err, "NOSCRIPT") {
		if err = fairRefreshScript.Load(ctx, q.e.client).Err(); err == nil {
			out, err = send()
		}
	}
	gone := make([][]string, len(out))
	var errs []error
	for i, c := range out {
		gone[i] = c.Val()
		if c.Err() != nil {
			errs = append(errs, c.Err())
		}
	}
	if len(errs) == 0 && err != nil {
		errs = append(errs, err)
	}
	return gone, errors.Join(errs...)
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
	case want.kind != locker.KindMutex:
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

// wakeTicketMsg wakes the fair waiter of c whose ticket a release's
// message names, called with the hub's mutex held.
func wakeTicketMsg(c *channel, ticket string) {
	n, _ := strconv.ParseInt(ticket, 10, 64)
	wakeTicket(c, n)
}

// wakeTicket wakes the fair waiter of c with ticket n, called with the
// hub's mutex held.
func wakeTicket(c *channel, n int64) {
	for w := c.head; w != nil; w = w.next {
		if w.want.kind == locker.KindMutex && w.want.ticket == n {
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

// inspectFair reports the holder of name and its queue, first in line
// first; Token is each waiter's ticket and TTL the time its place has left
// unless refreshed.
func (e *Engine) inspectFair(ctx context.Context, name string) (locker.Inspection, error) {
	lock := e.keysFor(name).lock
	exp := lock + queueSuffix + expSuffix
	r, err := e.inspectKeys(ctx, familyInspectScript, "inspect", name, []string{lock, exp})
	if err != nil {
		return locker.Inspection{}, err
	}
	var in locker.Inspection
	if r.str != "" {
		h := parseHolder(r.str)
		h.TTL = r.ttl
		in.Holder = &h
	}
	for _, w := range entries(r.sets[0], r.now, locker.KindMutex) {
		in.Waiters = append(in.Waiters, w.Holder)
	}
	slices.SortFunc(in.Waiters, func(a, b locker.Holder) int { return cmp.Compare(a.Token, b.Token) })
	return in, nil
}

// forceUnlockFair is ForceUnlock on a fair engine: the first waiter in
// line is woken.
func (e *Engine) forceUnlockFair(ctx context.Context, name string) (string, error) {
	lock := e.keysFor(name).lock
	q := lock + queueSuffix
	return fairForceScript.Run(ctx, e.client, []string{lock, q, q + expSuffix}, e.numsub, e.publish).Text()
}
