package idem

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/orthrus-go/orthrus/internal/deadline"
	"github.com/orthrus-go/orthrus/locker"
)

// Gate runs each operation once across a fleet: Begin before the operation,
// Ticket.Done after it. A Gate is safe for concurrent use; it starts a
// goroutine only for pending outcomes (WithPending), which Close stops,
// and never closes the stores' clients.
type Gate struct {
	appKey  string
	set     settings
	single  Store            // New
	byName  map[string]Store // NewSwitched
	current func() string    // NewSwitched
	health  map[Store]*storeHealth
	missing storeHealth // the current engine has no store (NewSwitched)
	hashers sync.Pool   // *hasher, reset: keying one costs two hash blocks
	local   *local
	rec     recorder
	// observed is false for the no-op observer: the clock is then not read
	// for it.
	observed bool
	// timeouts bounds the round trips of callers whose context is
	// context.Background() without a timer per call. Nothing stops it:
	// Begin works after Close, and its one timer ends at its deadline.
	timeouts deadline.Shared
	// down reports a store its engine's breaker says is down (FromSwitcher):
	// a Done pinned there queues its outcome without waiting. nil: none.
	down    func(store string) bool
	closers []func() error // the stores the gate built (FromSwitcher)

	mu        sync.Mutex // guards what follows: the switch history
	seen      string     // the current engine at the last Begin
	prev      string     // the engine before seen; "" before any switch
	prevSince time.Time
	prevDown  time.Time // when the previous store last failed a check; zero: it answers

	stats counters
}

// storeHealth remembers whether a store was failing, so that an outage is
// logged when it starts and ends rather than on every call.
type storeHealth struct {
	down    atomic.Bool
	refused atomic.Int64 // Begins refused (fail-closed) or let through (fail-open) during the outage
}

type counters struct {
	run, duplicates, refused, unguarded atomic.Int64
}

// Stats counts what the gate's Begins returned since New.
type Stats struct {
	Run        int64 // a Ticket for an operation to run
	Duplicates int64 // a Duplicate
	Refused    int64 // fail-closed: an error because the store was unavailable
	Unguarded  int64 // fail-open: an unguarded Ticket because the store was unavailable
}

// Stats returns the gate's counters.
func (g *Gate) Stats() Stats {
	return Stats{g.stats.run.Load(), g.stats.duplicates.Load(), g.stats.refused.Load(), g.stats.unguarded.Load()}
}

// New returns a gate over one store. appKey namespaces the application's
// operations: it keys the hash of every ID, so applications sharing a store
// never collide, and an ID cannot be computed without it.
func New(appKey string, store Store, opts ...Option) (*Gate, error) {
	if store == nil {
		return nil, fmt.Errorf("%w: idem.New: store is nil", locker.ErrInvalidArgument)
	}
	g, err := newGate(appKey, []Store{store}, opts)
	if err != nil {
		return nil, err
	}
	g.single = store
	return g, nil
}

// NewSwitched returns a gate over the stores of several engines, one store
// per engine, named as the engines are (Store.Name). Every Begin goes to
// the store of the engine current() names at that moment, typically a
// switcher's Current method; the ticket stays pinned to that store, so its
// Done goes there even after a switch. A name with no store is treated as
// an unavailable store. See the package documentation for what a switch
// does to the dedupe window and WithCheckPrevious.
func NewSwitched(appKey string, current func() string, stores []Store, opts ...Option) (*Gate, error) {
	if current == nil {
		return nil, fmt.Errorf("%w: idem.NewSwitched: current is nil", locker.ErrInvalidArgument)
	}
	if len(stores) == 0 {
		return nil, fmt.Errorf("%w: idem.NewSwitched: no stores", locker.ErrInvalidArgument)
	}
	g, err := newGate(appKey, stores, opts)
	if err != nil {
		return nil, err
	}
	g.byName = make(map[string]Store, len(stores))
	for i, s := range stores {
		if s == nil {
			return nil, fmt.Errorf("%w: idem.NewSwitched: stores[%d] is nil", locker.ErrInvalidArgument, i)
		}
		if _, dup := g.byName[s.Name()]; dup {
			return nil, fmt.Errorf("%w: idem.NewSwitched: two stores named %q", locker.ErrInvalidArgument, s.Name())
		}
		g.byName[s.Name()] = s
	}
	g.current = current
	g.seen = current()
	return g, nil
}

func newGate(appKey string, stores []Store, opts []Option) (*Gate, error) {
	if appKey == "" {
		return nil, fmt.Errorf("%w: idem: application key is empty", locker.ErrInvalidArgument)
	}
	g := &Gate{appKey: appKey, health: make(map[Store]*storeHealth, len(stores))}
	g.set = settings{expiry: DefaultExpiry, retention: DefaultRetention, timeout: DefaultRequestTimeout,
		policy: FailClosed, log: slog.Default(), maxResult: DefaultMaxResult, pending: DefaultPending, obs: nopObserver{}}
	if err := apply(&g.set, opts, "idem: nil Option"); err != nil {
		return nil, err
	}
	if g.set.retention < g.set.expiry {
		return nil, fmt.Errorf("%w: idem: WithRetention(%v) is shorter than WithExpiry(%v)", locker.ErrInvalidArgument, g.set.retention, g.set.expiry)
	}
	for _, s := range stores {
		g.health[s] = &storeHealth{}
	}
	_, nop := g.set.obs.(nopObserver)
	g.observed = !nop
	g.timeouts.Timeout = g.set.timeout
	recent := 0
	if g.set.previous > 0 { // switches copy recent successes (claim.go)
		recent = g.set.pending
	}
	g.local = newLocal(g.set.cacheSize, min(g.set.cacheTTL, g.set.retention), recent, g.set.expiry)
	return g, nil
}

// MaxResult returns the largest result Succeed stores (WithMaxResult).
func (g *Gate) MaxResult() int { return g.set.maxResult }

// Identify returns the ID of content under the gate's application key; see
// the package-level Identify.
func (g *Gate) Identify(content any) (ID, error) {
	h, _ := g.hashers.Get().(*hasher)
	if h == nil {
		h = newHasher(g.appKey)
	}
	id, err := h.identify(content)
	g.hashers.Put(h)
	return id, err
}

// Duplicate describes the earlier attempt of an operation Begin refused.
type Duplicate struct {
	// State is Running when the earlier attempt has not reported yet, and
	// Succeeded when it has succeeded.
	State State
	// Begun is when the earlier attempt began, by its process's clock.
	Begun time.Time
	// Result is what the earlier attempt stored with Succeed.
	Result []byte
	// Mismatch is true when Begin was given a fingerprint and the earlier
	// attempt recorded a different one (or none).
	Mismatch bool
	// Store names the store that holds the record.
	Store string
}

// Begin records that the operation described by content is about to run,
// unless it already is or already did. It returns a Ticket when the caller
// should run the operation and report its outcome with Ticket.Done, or a
// Duplicate when it should not run it; a duplicate is not an error.
//
// content is an order ID (a string), or a map or struct of the fields that
// make the operation unique; see Identify. On an unavailable store Begin
// applies the policy (WithPolicy): an error wrapping locker.ErrUnavailable
// (FailClosed), or an unguarded Ticket (FailOpen). Every round trip is
// bounded by ctx and the request timeout; when ctx ends first Begin returns
// ctx.Err().
func (g *Gate) Begin(ctx context.Context, content any, opts ...BeginOption) (*Ticket, *Duplicate, error) {
	if ctx == nil {
		return nil, nil, fmt.Errorf("%w: idem: Begin: ctx is nil", locker.ErrInvalidArgument)
	}
	start := time.Now()
	if !g.observed {
		tk, dup, _, err := g.begin(ctx, start, content, opts)
		return tk, dup, err
	}
	ctx = g.set.obs.BeginStart(ctx)
	tk, dup, where, err := g.begin(ctx, start, content, opts)
	g.set.obs.BeginEnd(ctx, BeginEvent{Outcome: outcomeOf(tk, dup, err), Store: where, Took: time.Since(start), Err: err})
	return tk, dup, err
}

func outcomeOf(tk *Ticket, dup *Duplicate, err error) Outcome {
	switch {
	case err != nil && errors.Is(err, locker.ErrUnavailable):
		return OutcomeRefused
	case err != nil:
		return OutcomeError
	case dup != nil && dup.Mismatch:
		return OutcomeMismatch
	case dup != nil && dup.State == Running:
		return OutcomeConflict
	case dup != nil:
		return OutcomeReplayed
	case tk.unguarded:
		return OutcomeUnguarded
	}
	return OutcomeRan
}

// begin is Begin; where names what decided, for the observer.
func (g *Gate) begin(ctx context.Context, now time.Time, content any, opts []BeginOption) (_ *Ticket, _ *Duplicate, where string, _ error) {
	var bs beginSettings
	if len(opts) > 0 { // options escape their settings: none, no allocation
		var err error
		if bs, err = resolveBegin(opts); err != nil {
			return nil, nil, "", err
		}
	}
	id, err := g.Identify(content)
	if err != nil {
		return nil, nil, "", err
	}
	if g.set.disabled {
		g.stats.unguarded.Add(1)
		return &Ticket{g: g, id: id, key: id.String(), unguarded: true}, nil, "", nil
	}
	key := id.String()
	if dup := g.local.lookup(key, bs.fingerprint, now); dup != nil {
		g.stats.duplicates.Add(1)
		return nil, dup, "local", nil
	}
	ttl := g.set.expiry
	if dl, ok := ctx.Deadline(); ok && g.set.fromDeadline {
		ttl = max(min(ttl, dl.Sub(now)), time.Millisecond)
	}
	var tried Store
	for range max(1, len(g.byName)) {
		store, prev := g.pick()
		if store == nil {
			err := fmt.Errorf("idem: begin %s: %w: current engine %q has no store", key, locker.ErrUnavailable, g.seenName())
			tk, dup, err := g.degrade(nil, id, err)
			return tk, dup, "", err
		}
		if store == tried { // no switch since the failure
			break
		}
		tried = store
		if prev != nil {
			dup, err := g.checkPrevious(ctx, prev, key, bs.fingerprint)
			if err != nil || dup != nil {
				if dup != nil {
					g.stats.duplicates.Add(1)
				}
				return nil, dup, prev.Name(), err
			}
		}
		tk, dup, err := g.create(ctx, store, id, key, ttl, bs.fingerprint)
		if err == nil || ctx.Err() != nil || !errors.Is(err, locker.ErrUnavailable) {
			return tk, dup, store.Name(), err
		}
		// The store did not answer: if the switcher moved meanwhile, the
		// caller's budget goes to the new engine rather than to a refusal.
		if g.single != nil || g.byName[g.current()] == store {
			tk, dup, err := g.degrade(store, id, err)
			return tk, dup, store.Name(), err
		}
		g.health[store].refused.Add(1)
		if g.health[store].down.CompareAndSwap(false, true) {
			g.set.log.Warn("idem: store unavailable; the engine switched, trying the new one", "store", store.Name(), "err", err)
		}
	}
	err = fmt.Errorf("idem: begin %s on %q: %w: no answer", key, tried.Name(), locker.ErrUnavailable)
	tk, dup, err := g.degrade(tried, id, err)
	return tk, dup, tried.Name(), err
}

// create makes the record of a new attempt on store, or reads the live one.
func (g *Gate) create(ctx context.Context, store Store, id ID, key string, ttl time.Duration, fp []byte) (*Ticket, *Duplicate, error) {
	rec := Record{State: Running, Token: newToken(), Begun: time.Now(), Fingerprint: fp}
	val := rec.encode(make([]byte, 0, headerLen+len(fp)))
	cctx, cancel := g.requestCtx(ctx)
	entry, created, err := store.Create(cctx, key, val, ttl, g.set.retention)
	cancel()
	g.storeCall(ctx, store, "create", rec.Begun, err)
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
		if unavailable(ctx, err) {
			g.cleanup(store, key, val, ttl)
		}
		return nil, nil, g.storeErr("begin", store, key, err)
	}
	g.recovered(store)
	// Our own value: a retried request whose first reply was lost made it.
	if created || bytes.Equal(entry.Value, val) {
		g.stats.run.Add(1)
		tk := &Ticket{g: g, store: store, id: id, key: key, entry: entry, rec: rec, until: rec.Begun.Add(ttl)}
		g.local.running(tk)
		return tk, nil, nil
	}
	dup, r, err := duplicateOf(store, entry, fp)
	if err != nil {
		return nil, nil, fmt.Errorf("idem: begin %s on %q: %w", key, store.Name(), err)
	}
	g.local.put(key, r, store.Name())
	g.stats.duplicates.Add(1)
	return nil, dup, nil
}

func duplicateOf(store Store, e Entry, fp []byte) (*Duplicate, Record, error) {
	r, err := DecodeRecord(e.Value)
	if err != nil {
		return nil, r, err
	}
	return &Duplicate{State: r.State, Begun: r.Begun, Result: r.Result, Store: store.Name(),
		Mismatch: fp != nil && !bytes.Equal(fp, r.Fingerprint)}, r, nil
}

// storeErr makes sure that a store's failure, and the request timeout,
// read as unavailability.
func (g *Gate) storeErr(op string, s Store, key string, err error) error {
	if errors.Is(err, locker.ErrUnavailable) {
		return fmt.Errorf("idem: %s %s on %q: %w", op, key, s.Name(), err)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("idem: %s %s on %q: %w: no answer within %v", op, key, s.Name(), locker.ErrUnavailable, g.set.timeout)
	}
	return fmt.Errorf("idem: %s %s on %q: %w", op, key, s.Name(), err)
}

// degrade applies the policy to a Begin whose store failed with err.
func (g *Gate) degrade(s Store, id ID, err error) (*Ticket, *Duplicate, error) {
	if !errors.Is(err, locker.ErrUnavailable) {
		return nil, nil, err
	}
	h, name := &g.missing, g.seenName()
	if s != nil {
		h, name = g.health[s], s.Name()
	}
	h.refused.Add(1)
	if h.down.CompareAndSwap(false, true) {
		g.set.log.Warn("idem: store unavailable", "store", name, "policy", g.set.policy.String(), "err", err)
	}
	if g.set.policy == FailOpen {
		g.stats.unguarded.Add(1)
		return &Ticket{g: g, id: id, key: id.String(), unguarded: true}, nil, nil
	}
	g.stats.refused.Add(1)
	return nil, nil, err
}

// prevRetry is how long the checks of a previous store that failed one
// stop, unless a write there shows it is back sooner.
const prevRetry = 5 * time.Second

// recovered logs the end of a store's outage, and resumes the checks of a
// previous store that is back.
func (g *Gate) recovered(s Store) {
	for _, h := range [...]*storeHealth{g.health[s], &g.missing} {
		if h.down.Load() && h.down.CompareAndSwap(true, false) {
			if h != &g.missing {
				g.mu.Lock()
				if g.prev == s.Name() {
					g.prevDown = time.Time{}
				}
				g.mu.Unlock()
			}
			g.set.log.Info("idem: store answers again", "store", s.Name(), "policy", g.set.policy.String(),
				"affected", h.refused.Swap(0))
		}
	}
}

// pick returns the store for a new attempt and, with WithCheckPrevious,
// the previous engine's store to look in first.
func (g *Gate) pick() (cur, prev Store) {
	if g.single != nil {
		return g.single, nil
	}
	name := g.current()
	now := time.Now()
	g.mu.Lock()
	switched := name != g.seen
	if switched {
		g.prev, g.prevSince, g.prevDown = g.seen, now, time.Time{}
		if s := g.byName[g.prev]; s != nil && g.health[s].down.Load() {
			g.prevDown = now // known down here: check it again once it answers, or after prevRetry
		}
		g.seen = name
		g.set.log.Debug("idem: engine switched", "from", g.prev, "to", name)
	}
	if g.set.previous > 0 && g.prev != "" && g.prev != name && (g.prevDown.IsZero() || now.Sub(g.prevDown) >= prevRetry) && now.Sub(g.prevSince) < g.set.retention {
		prev = g.byName[g.prev]
	}
	g.mu.Unlock()
	if switched {
		g.claimOn(g.byName[name])
	}
	return g.byName[name], prev
}

func (g *Gate) seenName() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.seen
}

// checkPrevious looks for a live record on the previous engine's store.
// A failure there is not the caller's problem: it stops the checks for
// prevRetry, or until a write there succeeds.
func (g *Gate) checkPrevious(ctx context.Context, prev Store, key string, fp []byte) (*Duplicate, error) {
	cctx, cancel := deadline.Within(ctx, g.set.previous)
	start := g.callStart()
	e, ok, err := prev.Get(cctx, key)
	cancel()
	g.storeCall(ctx, prev, "get", start, err)
	switch {
	case err != nil && ctx.Err() != nil:
		return nil, ctx.Err()
	case err != nil:
		g.mu.Lock()
		if h := g.health[prev]; h != nil {
			h.down.Store(true) // its recovery (the background recorder's write) resumes the checks
		}
		if g.prev == prev.Name() {
			if g.prevDown.IsZero() {
				g.set.log.Warn("idem: previous store does not answer; checking it again when it is back, or in 5s", "store", prev.Name(), "err", err)
			}
			g.prevDown = time.Now()
		}
		g.mu.Unlock()
		return nil, nil
	}
	g.recovered(prev) // resumes the checks, and Done waits for it again
	if !ok {
		return nil, nil
	}
	dup, _, err := duplicateOf(prev, e, fp)
	if err != nil {
		return nil, fmt.Errorf("idem: begin %s on previous %q: %w", key, prev.Name(), err)
	}
	return dup, nil
}

// Lookup returns the record of the operation with the given ID on the
// store named store ("" for the store of New, or the current one of a
// switched gate), and false when there is none. For operators.
func (g *Gate) Lookup(ctx context.Context, store string, id ID) (Record, Entry, bool, error) {
	s, err := g.storeNamed(store)
	if err != nil {
		return Record{}, Entry{}, false, err
	}
	cctx, cancel := context.WithTimeout(ctx, g.set.timeout)
	defer cancel()
	e, ok, err := s.Get(cctx, id.String())
	if err != nil || !ok {
		if err != nil {
			err = g.storeErr("lookup", s, id.String(), err)
		}
		return Record{}, Entry{}, false, err
	}
	r, err := DecodeRecord(e.Value)
	if err != nil {
		return Record{}, e, true, fmt.Errorf("idem: lookup %s on %q: %w", id, s.Name(), err)
	}
	return r, e, true, nil
}

// Forget deletes the record of the operation with the given ID on the
// named store (as Lookup), whatever its state, so that the operation can
// run again; it reports whether there was a record. For operators.
func (g *Gate) Forget(ctx context.Context, store string, id ID) (bool, error) {
	s, err := g.storeNamed(store)
	if err != nil {
		return false, err
	}
	cctx, cancel := context.WithTimeout(ctx, g.set.timeout)
	defer cancel()
	ok, err := s.Delete(cctx, id.String())
	g.local.forget(id.String())
	if err != nil {
		return false, g.storeErr("forget", s, id.String(), err)
	}
	return ok, nil
}

func (g *Gate) storeNamed(name string) (Store, error) {
	switch {
	case g.single != nil && (name == "" || name == g.single.Name()):
		return g.single, nil
	case g.single != nil:
		return nil, fmt.Errorf("%w: idem: no store named %q (the gate has %q)", locker.ErrInvalidArgument, name, g.single.Name())
	case name == "":
		name = g.current()
	}
	if s := g.byName[name]; s != nil {
		return s, nil
	}
	return nil, fmt.Errorf("%w: idem: no store named %q", locker.ErrInvalidArgument, name)
}

// Ticket is one attempt's right to run an operation. Report the outcome
// once with Done (or Succeed to store a result).
type Ticket struct {
	g         *Gate
	store     Store
	id        ID
	key       string
	entry     Entry
	rec       Record
	unguarded bool
	until     time.Time // when the running record expires, by this process's clock

	mu   sync.Mutex
	done bool

	// Guarded by local.mu. outcome is Succeeded once a success is known
	// but pending; final once Done has taken the outcome (finalOK: a
	// success, with result); mirror is the claim on the store switched to.
	outcome     State
	result      []byte
	final       bool
	finalOK     bool
	mirror      Store
	mirrorEntry Entry
}

// ID returns the operation's ID.
func (t *Ticket) ID() ID { return t.id }

// Store names the store that holds the attempt's record; "" when
// unguarded.
func (t *Ticket) Store() string {
	if t.store == nil {
		return ""
	}
	return t.store.Name()
}

// Unguarded is true when the store was unavailable and the policy is
// FailOpen: nothing was recorded, and a duplicate may be running.
func (t *Ticket) Unguarded() bool { return t.unguarded }

// Done records the operation's outcome: opErr nil is Succeed(ctx, nil);
// otherwise the record is deleted, so that a retry can run at once. Each
// happens only if the record is still this attempt's: when it expired
// (and may belong to a newer attempt) Done writes nothing and returns an
// error wrapping ErrNotOwner. Done is bounded by ctx and the request
// timeout; give it a context that outlives the operation's cancellation
// (context.WithoutCancel) so that an aborted request still reports. When
// the store does not answer, the gate keeps the outcome and writes it in
// the background (WithPending): Done returns an error wrapping ErrPending,
// and duplicates in this process get the outcome meanwhile. Without room
// for it, after an error wrapping locker.ErrUnavailable or a context
// error, Done may be called again; after any other result it returns
// ErrDone.
func (t *Ticket) Done(ctx context.Context, opErr error) error {
	return t.finish(ctx, "Done", opErr == nil, nil)
}

// Succeed records that the operation succeeded, with result (at most
// WithMaxResult bytes; nil for none) for the duplicates to return, and
// keeps the record for the retention. See Done for the rest.
func (t *Ticket) Succeed(ctx context.Context, result []byte) error {
	if len(result) > t.g.set.maxResult {
		return fmt.Errorf("%w: idem: Succeed: result is %d bytes, over WithMaxResult(%d)", locker.ErrInvalidArgument, len(result), t.g.set.maxResult)
	}
	return t.finish(ctx, "Succeed", true, result)
}

// finish writes the outcome to the attempt's record, once: a success
// (with result) rewrites it, a failure removes it; op is the method the
// caller called, which the errors name.
func (t *Ticket) finish(ctx context.Context, op string, succeeded bool, result []byte) error {
	if ctx == nil {
		return fmt.Errorf("%w: idem: %s: ctx is nil", locker.ErrInvalidArgument, op)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		return fmt.Errorf("idem: %s %s: %w", op, t.key, ErrDone)
	}
	if t.unguarded {
		t.done = true
		return nil
	}
	g := t.g
	// A store known to be down (its last call failed, or its engine's
	// breaker is open) is not waited for: the outcome goes to the queue.
	if g.set.pending > 0 && (g.health[t.store].down.Load() || g.downElsewhere(t.store)) {
		if err := t.postpone(ctx, op, succeeded, result, locker.ErrUnavailable); err != nil {
			return err
		}
	}
	cctx, cancel := g.requestCtx(ctx)
	start := g.callStart()
	ok, err := t.writeOutcome(cctx, t.store, t.entry, succeeded, result)
	cancel()
	g.storeCall(ctx, t.store, opName(succeeded), start, err)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		err = g.storeErr(op, t.store, t.key, err)
		if errors.Is(err, locker.ErrUnavailable) && g.set.pending > 0 {
			if h := g.health[t.store]; h.down.CompareAndSwap(false, true) {
				g.set.log.Warn("idem: store unavailable", "store", t.store.Name(), "policy", g.set.policy.String(), "err", err)
			}
			if perr := t.postpone(ctx, op, succeeded, result, err); perr != nil {
				return perr
			}
		}
		return err
	}
	g.recovered(t.store)
	t.done = true
	g.local.settled(t, ok && succeeded, result)
	t.finalize(ctx, succeeded, result)
	if !ok {
		return fmt.Errorf("idem: %s %s on %q: %w", op, t.key, t.store.Name(), ErrNotOwner)
	}
	return nil
}

// downElsewhere reports that store is no longer current and its engine's
// breaker is open (FromSwitcher).
func (g *Gate) downElsewhere(store Store) bool {
	return g.down != nil && g.byName[g.current()] != store && g.down(store.Name())
}

// postpone queues the outcome for the background recorder and marks the
// ticket done; it returns the error Done returns then, or nil when there
// is no room (the caller writes as without WithPending).
func (t *Ticket) postpone(ctx context.Context, op string, succeeded bool, result []byte, cause error) error {
	g := t.g
	g.local.mu.Lock()
	if succeeded {
		t.outcome, t.result = Succeeded, result
	}
	g.local.mu.Unlock()
	if !g.queue(t.outcomeJob(op, succeeded, result)) {
		g.local.mu.Lock()
		t.outcome, t.result = 0, nil
		g.local.mu.Unlock()
		return nil
	}
	t.done = true
	t.finalize(ctx, succeeded, result)
	return pendingErr(op, t.key, t.store.Name(), cause)
}

// requestCtx returns ctx bounded by the request timeout. The bare
// context.Background() of a job or a consumer takes the gate's shared
// deadline (package internal/deadline), as the engines' requests do: no
// timer per round trip. Any other context keeps its values (a trace span)
// and gets its own bound.
func (g *Gate) requestCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return g.timeouts.Bound(ctx)
}

// callStart is when a round trip to a store starts, for the observer;
// zero, and no reading of the clock, without one.
func (g *Gate) callStart() time.Time {
	if !g.observed {
		return time.Time{}
	}
	return time.Now()
}

// storeCall reports a round trip to s that started at start (callStart).
func (g *Gate) storeCall(ctx context.Context, s Store, op string, start time.Time, err error) {
	if g.observed {
		g.set.obs.StoreCall(ctx, s.Name(), op, time.Since(start), err)
	}
}
