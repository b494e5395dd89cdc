package lockertest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/internal/lockrule"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/inspect"
)

// ModelOps is how many random operations RunModel makes per engine in CI.
const ModelOps = 10_000

// ModelSeedEnv names the environment variable that sets RunModel's seed, to
// replay a failure: ORTHRUS_MODEL_SEED=<the seed it printed>.
const ModelSeedEnv = "ORTHRUS_MODEL_SEED"

const (
	// modelSequences run at once, each on names and owners of its own, so
	// that the round trips of one overlap the others'.
	modelSequences = 4
	modelOwners    = 4 // owners per lock
	modelNames     = 2 // names per sequence, each a mutex, a read-write lock and a semaphore
	modelPermits   = 3 // the count every owner opens the semaphores with
	// modelAwait bounds every wait for what the oracle says must happen;
	// it is reached only when the engine deviates.
	modelAwait   = 30 * time.Second
	modelTimeout = 10 * time.Minute
	modelHistory = 16 // operations of a lock shown when it fails
)

// ModelConfig narrows RunModel to what an engine follows today, each
// field naming a known deviation from the rule; its zero value checks
// everything.
type ModelConfig struct {
	// Kinds are the locks the run covers: KindMutex, KindWrite (the
	// read-write lock), KindPermit (the semaphore); all three when empty.
	Kinds []inspect.Kind
	// FixedCount leaves the semaphores' stored count alone: no SetPermits.
	FixedCount bool
}

// RunModel runs ops random operations against the lock family's rule,
// package internal/lockrule, as the oracle: owners on two engines over the
// same servers block in Lock, try, cancel their waits, downgrade, release
// and change a semaphore's count, on the mutexes, read-write locks and
// semaphores of a few names, one subtest per kind (Mutex, RWLock,
// Semaphore), the ops shared among them. After each operation it waits
// for exactly the waiters the oracle grants, checks each TryLock against
// it, fails when a Lock returns while the oracle says it waits, and waits
// until the engine's inspection shows the model's holders and waiters, in
// order.
//
// The engine must implement inspect.Inspector and inspect.FamilyInspector
// (see Inspected for wrappers), and queue strictly first come, first
// served across processes (a Redis engine WithFair). The seed is logged;
// set ModelSeedEnv to replay it.
func RunModel(t *testing.T, factory Factory, ops int, c ModelConfig) {
	if len(c.Kinds) == 0 {
		c.Kinds = []inspect.Kind{inspect.KindMutex, inspect.KindWrite, inspect.KindPermit}
	}
	seed := modelSeed(t)
	for i, k := range c.Kinds {
		n := ops/len(c.Kinds) + boolInt(i < ops%len(c.Kinds))
		t.Run(modelCase(k), func(t *testing.T) {
			guardFor(t, modelTimeout, func() { runModel(t, factory, seed, n, k, c.FixedCount) })
		})
	}
}

// Inspected is e with the mutex inspection of op, for RunModel: a
// wrapper that inspects read-write locks and semaphores but not mutexes
// (the switcher, the fault wrapper) gives that of the engine it acquires
// on. e must implement inspect.FamilyInspector.
func Inspected(e locker.Engine, op inspect.Inspector) locker.Engine {
	return inspected{Engine: e, Inspector: op, FamilyInspector: e.(inspect.FamilyInspector)}
}

type inspected struct {
	locker.Engine
	inspect.Inspector
	inspect.FamilyInspector
}

// modelCase names the subtest of kind k.
func modelCase(k inspect.Kind) string {
	switch k {
	case inspect.KindMutex:
		return "Mutex"
	case inspect.KindPermit:
		return "Semaphore"
	}
	return "RWLock"
}

// runModel runs ops operations on locks of kind k, in modelSequences
// sequences at once.
func runModel(t *testing.T, factory Factory, seed uint64, ops int, k inspect.Kind, fixedCount bool) {
	engines := []locker.Engine{open(t, factory).Engine, open(t, factory).Engine}
	var op inspect.Inspector
	if k == inspect.KindMutex {
		var ok bool
		if op, ok = engines[0].(inspect.Inspector); !ok {
			t.Fatalf("%T does not implement inspect.Inspector", engines[0])
		}
	}
	seqs := make([]*sequence, modelSequences)
	for i := range seqs {
		seqs[i] = newSequence(t, seed, i, engines, op, k)
		seqs[i].fixedCount = fixedCount
	}
	start := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, len(seqs))
	for i, s := range seqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.run(ops/len(seqs) + boolInt(i < ops%len(seqs)))
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	d := time.Since(start)
	t.Logf("%d operations in %v: %.0f/s; %s", ops, d.Round(time.Millisecond), float64(ops)/d.Seconds(), tally(seqs))
}

// modelSeed is ModelSeedEnv's seed, or a new one, logged.
func modelSeed(t *testing.T) uint64 {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv(ModelSeedEnv); v != "" {
		var err error
		if seed, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("%s=%q: %v", ModelSeedEnv, v, err)
		}
	}
	t.Logf("model seed %d (replay: %s=%d)", seed, ModelSeedEnv, seed)
	return seed
}

// tally says what the sequences did.
func tally(seqs []*sequence) string {
	var kinds [len(opNames)]int
	granted, longest := 0, 0
	for _, s := range seqs {
		for i, n := range s.tally {
			kinds[i] += n
		}
		granted, longest = granted+s.granted, max(longest, s.longest)
	}
	var b strings.Builder
	for i, n := range kinds {
		fmt.Fprintf(&b, "%s %d, ", opNames[i], n)
	}
	fmt.Fprintf(&b, "waiters granted %d, longest queue %d", granted, longest)
	return b.String()
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// sequence is one random run on locks of its own.
type sequence struct {
	seed  uint64
	id    int
	rng   *rand.Rand
	op    int // index of the operation running
	locks []*mlock
	// What the run did, for the log.
	tally   [len(opNames)]int
	granted int // waiters the oracle granted after an operation
	longest int // longest queue
	// fixedCount: no SetPermits (ModelConfig.FixedCount).
	fixedCount bool
	mutexs     inspect.Inspector
	family     inspect.FamilyInspector
}

// mlock is the model of one lock: its queue of holds and waiters, oldest
// first, as lockrule sees it.
type mlock struct {
	kind    inspect.Kind // KindMutex, KindWrite (the read-write lock) or KindPermit
	name    string
	count   int // the semaphore's stored count
	queue   []*mentry
	owners  []*mowner
	history []string
	// returned is signalled when a waiter's LockCtx returns, so that a
	// wait for one grant sees at once another waiter get in instead.
	returned chan struct{}
}

// mowner is one owner of a lock, with the handles it acquires through.
type mowner struct {
	id      string
	engine  locker.Engine
	mutex   locker.Handle
	rw      locker.RWLock
	sem     locker.Semaphore
	checked bool // its semaphore has compared its count with the stored one
}

// mentry is a hold or waiter of the model, with the engine's handle.
type mentry struct {
	lockrule.Entry
	owner *mowner
	h     locker.Handle
	held  bool
	// returned: its LockCtx returned nil while the oracle said it waits
	// (the run fails; cleanup releases it).
	returned bool
	done     chan error // a waiter's LockCtx result
	cancel   context.CancelFunc
}

func newSequence(t *testing.T, seed uint64, id int, engines []locker.Engine, op inspect.Inspector, k inspect.Kind) *sequence {
	t.Helper()
	s := &sequence{seed: seed, id: id, rng: rand.New(rand.NewPCG(seed, uint64(k)<<8|uint64(id))), mutexs: op, family: familyInspector(t, engines[0])}
	for n := range modelNames {
		name := lockName(t, fmt.Sprintf("model%d/%d", id, n))
		l := &mlock{kind: k, name: name, count: modelPermits, returned: make(chan struct{}, 1)}
		for i := range modelOwners {
			l.owners = append(l.owners, newOwner(t, engines[i%len(engines)], k, name, fmt.Sprintf("s%d-%s-o%d", id, k, i)))
		}
		s.locks = append(s.locks, l)
	}
	return s
}

func newOwner(t *testing.T, e locker.Engine, k inspect.Kind, name, id string) *mowner {
	t.Helper()
	o := &mowner{id: id, engine: e}
	var err error
	switch k {
	case inspect.KindMutex:
		o.mutex, err = e.NewLocker(name, locker.WithOwner(id))
	case inspect.KindWrite:
		o.rw, err = e.NewRWLock(name, locker.WithOwner(id))
	default:
		o.sem, err = e.NewSemaphore(name, modelPermits, locker.WithOwner(id))
	}
	if err != nil {
		t.Fatalf("new %s %q: %v", k, name, err)
	}
	return o
}

// opKind is what an operation does.
type opKind uint8

const (
	opLock       opKind = iota // LockCtx in a goroutine, as a waiter
	opTry                      // TryLock
	opCancel                   // cancel a waiting LockCtx
	opRelease                  // Unlock a hold
	opDowngrade                // the write holder takes the read side
	opSetPermits               // store another count
)

var opNames = [...]string{"lock", "trylock", "cancel", "release", "downgrade", "setpermits"}

// mop is one operation on one lock.
type mop struct {
	kind  opKind
	lock  *mlock
	owner *mowner
	entry *mentry      // the waiter or hold cancelled or released
	side  inspect.Kind // the kind acquired
	n     int          // permits asked, or the count stored
}

func (o mop) String() string {
	s := fmt.Sprintf("%s %s %q", opNames[o.kind], o.lock.kind, o.lock.name)
	if o.owner != nil {
		s += " by " + o.owner.id
	}
	if o.kind == opLock || o.kind == opTry || o.kind == opRelease || o.kind == opCancel {
		s += " (" + o.side.String()
		if o.side == inspect.KindPermit {
			s += fmt.Sprintf(" %d", o.n)
		}
		s += ")"
	}
	if o.kind == opSetPermits {
		s += fmt.Sprintf(" to %d", o.n)
	}
	return s
}

// run makes n operations, then leaves nothing held or waiting.
func (s *sequence) run(n int) (err error) {
	defer s.cleanup()
	for s.op = range n {
		if err := s.pollWaiters(); err != nil {
			return err
		}
		o := s.pick()
		o.lock.remember(o.String())
		s.tally[o.kind]++
		if err := s.do(o); err != nil {
			return s.fail(o, err)
		}
		if err := s.settle(o.lock); err != nil {
			return s.fail(o, err)
		}
	}
	return nil
}

// fail is err with what it takes to replay and understand it.
func (s *sequence) fail(o mop, err error) error {
	return fmt.Errorf("model seed %d, sequence %d, op %d: %v: %w\n%s", s.seed, s.id, s.op, o, err, o.lock)
}

func (l *mlock) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "model queue of %s %q", l.kind, l.name)
	if l.kind == inspect.KindPermit {
		fmt.Fprintf(&b, " (count %d)", l.count)
	}
	b.WriteString(":")
	for i, e := range l.queue {
		fmt.Fprintf(&b, " [%d %s]", i, e)
	}
	fmt.Fprintf(&b, "\nlast operations on it:\n  %s", strings.Join(l.history, "\n  "))
	return b.String()
}

func (e *mentry) String() string {
	s := e.owner.id + " " + e.Kind.String()
	if e.Kind == inspect.KindPermit {
		s += fmt.Sprintf(" %d", e.Permits)
	}
	if e.Downgrade {
		s += " (downgrade)"
	}
	if e.held {
		return s + " held"
	}
	if e.returned {
		return s + " waits (its LockCtx returned)"
	}
	return s + " waits"
}

func (l *mlock) remember(op string) {
	if len(l.history) == modelHistory {
		l.history = l.history[1:]
	}
	l.history = append(l.history, op)
}

// pollWaiters fails when a Lock returned while the oracle says it waits.
func (s *sequence) pollWaiters() error {
	for _, l := range s.locks {
		if err := l.pollWaiters(nil); err != nil {
			return fmt.Errorf("model seed %d, sequence %d, before op %d: %w\n%s", s.seed, s.id, s.op, err, l)
		}
	}
	return nil
}

// pollWaiters fails when a waiter of l returned that the oracle does not
// grant (grants, or none when nil).
func (l *mlock) pollWaiters(grants []bool) error {
	for i, e := range l.queue {
		if e.held || e.returned || (grants != nil && grants[i]) {
			continue
		}
		select {
		case err := <-e.done:
			e.returned = err == nil
			return fmt.Errorf("the LockCtx of %s returned %v; the oracle says it waits", e, err)
		default:
		}
	}
	return nil
}

// pick draws a lock, then one of the operations its owners can make now,
// weighted so that queues grow and drain.
func (s *sequence) pick() mop {
	l := s.locks[s.rng.IntN(len(s.locks))]
	var ops []mop
	var weights []int
	add := func(w int, o mop) { ops, weights = append(ops, o), append(weights, w) }
	for _, o := range l.owners {
		mine := l.entriesOf(o)
		switch {
		case len(mine) == 0:
			side, n := l.draw(s.rng)
			add(4, mop{kind: opLock, lock: l, owner: o, side: side, n: n})
			add(2, mop{kind: opTry, lock: l, owner: o, side: side, n: n})
		case !mine[0].held:
			add(1, mop{kind: opCancel, lock: l, owner: o, entry: mine[0], side: mine[0].Kind, n: mine[0].Permits})
		default:
			for _, e := range mine {
				add(4, mop{kind: opRelease, lock: l, owner: o, entry: e, side: e.Kind, n: e.Permits})
			}
			if len(mine) == 1 && mine[0].Kind == inspect.KindWrite {
				add(2, mop{kind: opDowngrade, lock: l, owner: o, side: inspect.KindRead})
			}
		}
	}
	if l.kind == inspect.KindPermit && !s.fixedCount {
		add(1, mop{kind: opSetPermits, lock: l, n: 1 + s.rng.IntN(modelPermits+2)})
	}
	total := 0
	for _, w := range weights {
		total += w
	}
	r := s.rng.IntN(total)
	for i, w := range weights {
		if r < w {
			return ops[i]
		}
		r -= w
	}
	panic("unreachable")
}

// draw chooses what an idle owner of l asks for.
func (l *mlock) draw(rng *rand.Rand) (inspect.Kind, int) {
	switch l.kind {
	case inspect.KindMutex:
		return inspect.KindMutex, 0
	case inspect.KindWrite:
		return []inspect.Kind{inspect.KindRead, inspect.KindWrite}[rng.IntN(2)], 0
	}
	return inspect.KindPermit, 1 + rng.IntN(modelPermits)
}

func (l *mlock) entriesOf(o *mowner) []*mentry {
	var mine []*mentry
	for _, e := range l.queue {
		if e.owner == o {
			mine = append(mine, e)
		}
	}
	return mine
}

// mismatch reports whether o's acquisition must fail with
// ErrPermitsMismatch: its semaphore's first, with the stored count changed.
func (l *mlock) mismatch(o *mowner) bool {
	return l.kind == inspect.KindPermit && !o.checked && l.count != modelPermits
}

// rules is l's queue as lockrule sees it.
func (l *mlock) rules() ([]lockrule.Entry, []bool) {
	q, held := make([]lockrule.Entry, len(l.queue)), make([]bool, len(l.queue))
	for i, e := range l.queue {
		q[i], held[i] = e.Entry, e.held
	}
	return q, held
}

// remove takes e out of l's queue.
func (l *mlock) remove(e *mentry) {
	l.queue = slices.DeleteFunc(l.queue, func(x *mentry) bool { return x == e })
	if e.cancel != nil {
		e.cancel()
	}
}

func (s *sequence) do(o mop) error {
	switch o.kind {
	case opLock:
		return o.lock.lock(o)
	case opTry:
		return o.lock.try(o)
	case opCancel:
		return o.lock.cancelWait(o.entry)
	case opRelease:
		if _, err := unlock(o.entry.h); err != nil {
			return fmt.Errorf("Unlock() = %w", err)
		}
		o.lock.remove(o.entry)
		return nil
	case opDowngrade:
		return o.lock.downgrade(o)
	}
	ctx, cancel := context.WithTimeout(context.Background(), modelAwait)
	defer cancel()
	if err := s.family.SetPermits(ctx, o.lock.name, o.n); err != nil {
		return fmt.Errorf("SetPermits(%d) = %w", o.n, err)
	}
	o.lock.count = o.n
	return nil
}

// handle is the Handle o acquires through.
func (o mop) handle() (locker.Handle, error) {
	switch o.side {
	case inspect.KindMutex:
		return o.owner.mutex, nil
	case inspect.KindRead:
		return o.owner.rw.ReadLock(), nil
	case inspect.KindWrite:
		return o.owner.rw.WriteLock(), nil
	}
	return o.owner.sem.NewPermit(o.n)
}

func (o mop) newEntry() *mentry {
	return &mentry{Entry: lockrule.Entry{Kind: o.side, Permits: o.n}, owner: o.owner}
}

// lock starts LockCtx as a waiter and queues it in the model; settle
// waits for it when the oracle grants it.
func (l *mlock) lock(o mop) error {
	h, err := o.handle()
	if err != nil {
		return fmt.Errorf("NewPermit(%d) = %w", o.n, err)
	}
	e := o.newEntry()
	e.h, e.done = h, make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	go func() {
		e.done <- h.LockCtx(ctx)
		select {
		case l.returned <- struct{}{}:
		default:
		}
	}()
	if l.mismatch(o.owner) {
		defer cancel()
		if err, ok := awaitResult(e.done); !ok || !errors.Is(err, locker.ErrPermitsMismatch) {
			return fmt.Errorf("LockCtx() = %v (returned: %v) opened with %d, stored %d; want ErrPermitsMismatch", err, ok, modelPermits, l.count)
		}
		return nil
	}
	l.queue = append(l.queue, e)
	return nil
}

// try checks TryLock against the oracle.
func (l *mlock) try(o mop) error {
	h, err := o.handle()
	if err != nil {
		return fmt.Errorf("NewPermit(%d) = %w", o.n, err)
	}
	ok, err := h.TryLock()
	e := o.newEntry()
	e.h, e.held = h, true
	if ok {
		l.queue = append(l.queue, e) // held, whatever the oracle says: cleanup releases it
	}
	if l.mismatch(o.owner) {
		if ok || !errors.Is(err, locker.ErrPermitsMismatch) {
			return fmt.Errorf("TryLock() = %v, %v opened with %d, stored %d; want false, ErrPermitsMismatch", ok, err, modelPermits, l.count)
		}
		return nil
	}
	q, held := l.rules()
	if !ok {
		q, held = append(q, e.Entry), append(held, false)
	}
	want := lockrule.DecideHeld(q, held, len(q)-1, l.count).Granted
	if ok != want || err != nil {
		return fmt.Errorf("TryLock() = %v, %v; the oracle wants %v, nil", ok, err, want)
	}
	o.owner.checked = true
	return nil
}

// cancelWait cancels a waiter the oracle says waits.
func (l *mlock) cancelWait(e *mentry) error {
	e.cancel()
	err, ok := awaitResult(e.done)
	switch {
	case !ok:
		return fmt.Errorf("LockCtx() did not return within %v of its cancel", modelAwait)
	case err == nil:
		e.returned = true
		return errors.New("LockCtx() = nil after its cancel: granted while the oracle says it waits")
	case err != context.Canceled:
		l.remove(e)
		return fmt.Errorf("LockCtx() after its cancel = %v; want context.Canceled", err)
	}
	l.remove(e)
	if l.kind == inspect.KindPermit && !e.owner.checked {
		// Whether a cancelled first acquisition compared the count is not
		// settled (a switcher's did: it tries before it waits): a new
		// Semaphore's next acquisition is its first for certain.
		sem, err := e.owner.engine.NewSemaphore(l.name, modelPermits, locker.WithOwner(e.owner.id))
		if err != nil {
			return fmt.Errorf("NewSemaphore() = %w", err)
		}
		e.owner.sem = sem
	}
	return nil
}

// downgrade has the write holder take the read side, at once.
func (l *mlock) downgrade(o mop) error {
	h := o.owner.rw.ReadLock()
	ok, err := h.TryLock()
	if ok {
		l.queue = append(l.queue, &mentry{Entry: lockrule.Entry{Kind: inspect.KindRead, Downgrade: true}, owner: o.owner, h: h, held: true})
	}
	if !ok || err != nil {
		return fmt.Errorf("read TryLock() by the write holder = %v, %v; want true, nil", ok, err)
	}
	return nil
}

// awaitResult waits up to modelAwait for an acquisition's result; false
// when it did not come.
func awaitResult(done <-chan error) (error, bool) {
	t := time.NewTimer(modelAwait)
	defer t.Stop()
	select {
	case err := <-done:
		return err, true
	case <-t.C:
		return nil, false
	}
}

// settle waits for the waiters the oracle grants now, then until the
// engine shows l as the model does.
func (s *sequence) settle(l *mlock) error {
	q, held := l.rules()
	grants := lockrule.Grants(q, held, l.count)
	for i, e := range l.queue {
		if !grants[i] || e.held {
			continue
		}
		if err := l.awaitGrant(e, grants); err != nil {
			return err
		}
		e.held = true
		e.owner.checked = true
		s.granted++
	}
	s.longest = max(s.longest, len(l.queue))
	return s.sync(l)
}

// awaitGrant waits for the grant of e, failing as soon as a waiter that
// the oracle does not grant returns.
func (l *mlock) awaitGrant(e *mentry, grants []bool) error {
	t := time.NewTimer(modelAwait)
	defer t.Stop()
	for {
		select {
		case err := <-e.done:
			if err != nil {
				return fmt.Errorf("%s: LockCtx() = %w; the oracle grants it", e, err)
			}
			return nil
		case <-l.returned:
			if err := l.pollWaiters(grants); err != nil {
				return err
			}
		case <-t.C:
			return fmt.Errorf("%s: not granted within %v; the oracle grants it", e, modelAwait)
		}
	}
}

// sync waits until the engine's inspection of l shows the model's number
// of holds and its waiters, in order: so a waiter is in line before the
// next operation, and a cancelled one out of it. It polls: no engine
// tells when a waiter is queued.
func (s *sequence) sync(l *mlock) error {
	holds, waiters := 0, []string{}
	for _, e := range l.queue {
		if e.held {
			holds++
		} else {
			waiters = append(waiters, e.owner.id)
		}
	}
	deadline := time.Now().Add(modelAwait)
	for pause := 50 * time.Microsecond; ; pause = min(2*pause, 5*time.Millisecond) {
		gotHolds, gotWaiters, err := s.inspect(l)
		if err != nil {
			return err
		}
		if gotHolds == holds && slices.Equal(gotWaiters, waiters) {
			return nil
		}
		if err := l.pollWaiters(nil); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the engine shows %d holds and waiters %v for %v; the model %d and %v", gotHolds, gotWaiters, modelAwait, holds, waiters)
		}
		time.Sleep(pause)
	}
}

// inspect returns the number of holds of l and its waiters' owners, as
// the engine reports them.
func (s *sequence) inspect(l *mlock) (int, []string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), modelAwait)
	defer cancel()
	waiters := []string{}
	if l.kind == inspect.KindMutex {
		in, err := s.mutexs.Inspect(ctx, l.name)
		if err != nil {
			return 0, nil, fmt.Errorf("Inspect() = %w", err)
		}
		for _, w := range in.Waiters {
			waiters = append(waiters, w.Owner)
		}
		return boolInt(in.Holder != nil), waiters, nil
	}
	in, err := s.family.InspectFamily(ctx, l.kind, l.name)
	if err != nil {
		return 0, nil, fmt.Errorf("InspectFamily() = %w", err)
	}
	for _, w := range in.Waiters {
		waiters = append(waiters, w.Owner)
	}
	return len(in.Holders), waiters, nil
}

// cleanup cancels the waiters and releases the holds the run left.
func (s *sequence) cleanup() {
	for _, l := range s.locks {
		for _, e := range l.queue {
			if !e.held && !e.returned {
				e.cancel()
				err, ok := awaitResult(e.done)
				e.returned = ok && err == nil
			}
		}
		for _, e := range slices.Backward(slices.Clone(l.queue)) {
			if e.held || e.returned {
				_, _ = unlock(e.h)
			}
			l.remove(e)
		}
	}
}
