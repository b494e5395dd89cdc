package redis_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/engines/redis"
	"github.com/orthrus-go/orthrus/internal/lockrule"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/inspect"
	"github.com/orthrus-go/orthrus/locker/lockertest"
)

// TestModel checks the engine against the lock family's rule: two fair
// engines (the rule is first come, first served across processes, which
// a mutex keeps only WithFair), each on a client of its own, as two
// processes; the mutex, the read-write lock and the semaphore, whose Lua
// states the rule (lua/family.lua).
func TestModel(t *testing.T) {
	lockertest.RunModel(t, func(t *testing.T) lockertest.Harness {
		return lockertest.Harness{Engine: newEngine(t, newSingle(t), redis.WithPrefix("model"), redis.WithFair())}
	}, lockertest.ModelOps, lockertest.ModelConfig{})
}

// weightOps is how many random operations TestModelWeights makes per kind.
const weightOps = 400

// TestModelWeights checks the ranking of the scripts against the rule as
// the oracle (lockrule.DecideHeld, with weights), which RunModel does not
// draw: owners of weights 1 to 3 on two fair engines lock, try, give up
// and release at random on one mutex, read-write lock and semaphore. After
// each operation the waiters the oracle grants must be granted, no other,
// and the engine must show the model's holds and waiters. A script that
// ranked by arrival alone, or a wake-up of the oldest waiter rather than
// the first ranked, fails it.
func TestModelWeights(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	engines := []*redis.Engine{fairEngine(t), fairEngine(t)}
	for _, k := range []inspect.Kind{inspect.KindMutex, inspect.KindWrite, inspect.KindPermit} {
		t.Run(k.String(), func(t *testing.T) {
			m := &wmodel{t: t, kind: k, name: t.Name(), engines: engines, rng: rand.New(rand.NewPCG(seed, uint64(k)))}
			defer m.cleanup()
			for m.op = range weightOps {
				m.step()
			}
		})
	}
}

// wmodel is the model of one lock: its holds and waiters, oldest first.
type wmodel struct {
	t       *testing.T
	kind    inspect.Kind // KindMutex, KindWrite (the read-write lock) or KindPermit
	name    string
	engines []*redis.Engine
	rng     *rand.Rand
	op      int
	owners  int
	queue   []*wentry
}

type wentry struct {
	lockrule.Entry
	owner  string
	h      locker.Handle
	held   bool
	done   chan error
	cancel context.CancelFunc
}

// wmodelCount is the semaphore's count.
const wmodelCount = 3

func (m *wmodel) fatalf(format string, args ...any) {
	m.t.Helper()
	m.t.Fatalf("op %d: %s\nmodel: %s", m.op, fmt.Sprintf(format, args...), m)
}

func (m *wmodel) String() string {
	s := ""
	for _, e := range m.queue {
		s += fmt.Sprintf(" [%s %v %d w%d held %v]", e.owner, e.Kind, e.Permits, e.Weight, e.held)
	}
	return s
}

func (m *wmodel) step() {
	switch r := m.rng.IntN(10); {
	case r < 4:
		m.lock()
	case r < 6:
		m.try()
	case r < 7:
		m.giveUp()
	default:
		m.release()
	}
	m.settle()
}

// draw makes a new owner's handle on the lock, of a random side or
// permits and weight.
func (m *wmodel) draw() (*wentry, locker.Handle) {
	m.owners++
	e := &wentry{Entry: lockrule.Entry{Kind: m.kind, Weight: 1 + m.rng.IntN(3)}, owner: fmt.Sprintf("o%d", m.owners)}
	en := m.engines[m.rng.IntN(len(m.engines))]
	opts := []locker.Option{locker.WithOwner(e.owner), locker.WithWeight(e.Weight)}
	var h locker.Handle
	var err error
	switch m.kind {
	case inspect.KindMutex:
		h, err = en.NewLocker(m.name, opts...)
	case inspect.KindWrite:
		var rw locker.RWLock
		if rw, err = en.NewRWLock(m.name, opts...); err == nil {
			h = rw.WriteLock()
			if m.rng.IntN(2) == 0 {
				e.Kind, h = inspect.KindRead, rw.ReadLock()
			}
		}
	default:
		e.Permits = 1 + m.rng.IntN(wmodelCount)
		var s locker.Semaphore
		if s, err = en.NewSemaphore(m.name, wmodelCount, opts...); err == nil {
			h, err = s.NewPermit(e.Permits)
		}
	}
	if err != nil {
		m.fatalf("new handle: %v", err)
	}
	return e, h
}

func (m *wmodel) lock() {
	e, h := m.draw()
	ctx, cancel := context.WithCancel(context.Background())
	e.h, e.cancel, e.done = h, cancel, make(chan error, 1)
	go func() { e.done <- h.LockCtx(ctx) }()
	m.queue = append(m.queue, e)
}

// try checks a TryLock, which ranks as weight 1, against the oracle.
func (m *wmodel) try() {
	e, h := m.draw()
	q, held := m.rules()
	q = append(q, lockrule.Entry{Kind: e.Kind, Permits: e.Permits, Weight: 1})
	want := lockrule.DecideHeld(q, append(held, false), len(q)-1, wmodelCount).Granted
	ok, err := h.TryLock()
	if ok {
		e.h, e.held = h, true
		m.queue = append(m.queue, e)
	}
	if ok != want || err != nil {
		m.fatalf("TryLock() of %s %v w%d = %v, %v; the oracle wants %v", e.owner, e.Kind, e.Weight, ok, err, want)
	}
}

func (m *wmodel) giveUp() {
	if e := m.pick(false); e != nil {
		e.cancel()
		if err := <-e.done; err != context.Canceled {
			e.held = err == nil // so that cleanup releases it
			m.fatalf("LockCtx() of %s after its cancel = %v; want context.Canceled", e.owner, err)
		}
		m.remove(e)
	}
}

func (m *wmodel) release() {
	if e := m.pick(true); e != nil {
		if err := e.h.Unlock(); err != nil {
			m.fatalf("Unlock() of %s = %v", e.owner, err)
		}
		m.remove(e)
	}
}

// pick is a random hold (held) or waiter; nil when there is none.
func (m *wmodel) pick(held bool) *wentry {
	var some []*wentry
	for _, e := range m.queue {
		if e.held == held {
			some = append(some, e)
		}
	}
	if len(some) == 0 {
		return nil
	}
	return some[m.rng.IntN(len(some))]
}

func (m *wmodel) remove(e *wentry) {
	m.queue = slices.DeleteFunc(m.queue, func(x *wentry) bool { return x == e })
}

func (m *wmodel) rules() ([]lockrule.Entry, []bool) {
	q, held := make([]lockrule.Entry, len(m.queue)), make([]bool, len(m.queue))
	for i, e := range m.queue {
		q[i], held[i] = e.Entry, e.held
	}
	return q, held
}

// settle waits for the waiters the oracle grants, checks that no other
// returned, and waits until the engine shows the model's holds and
// waiters, in order of arrival.
func (m *wmodel) settle() {
	q, held := m.rules()
	grants := lockrule.Grants(q, held, wmodelCount)
	for i, e := range m.queue {
		if e.held || !grants[i] {
			continue
		}
		select {
		case err := <-e.done:
			if err != nil {
				m.fatalf("LockCtx() of %s = %v; the oracle grants it", e.owner, err)
			}
		case <-time.After(20 * time.Second):
			m.fatalf("%s not granted within 20s; the oracle grants it", e.owner)
		}
		e.held = true
	}
	holds, waiters := 0, []string{}
	for _, e := range m.queue {
		if e.held {
			holds++
		} else {
			waiters = append(waiters, e.owner)
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		m.returned()
		gotHolds, gotWaiters := m.inspect()
		if gotHolds == holds && slices.Equal(gotWaiters, waiters) {
			return
		}
		if time.Now().After(deadline) {
			m.fatalf("the engine shows %d holds and waiters %v; the model %d and %v", gotHolds, gotWaiters, holds, waiters)
		}
		time.Sleep(time.Millisecond) // polls: nothing tells when a waiter is queued
	}
}

// returned fails when a waiter's LockCtx returned that the oracle says
// waits.
func (m *wmodel) returned() {
	for _, e := range m.queue {
		if e.held {
			continue
		}
		select {
		case err := <-e.done:
			e.held = err == nil // so that cleanup releases it
			m.fatalf("LockCtx() of %s returned %v; the oracle says it waits", e.owner, err)
		default:
		}
	}
}

// inspect is the number of holds and the owners of the waiters the engine
// shows.
func (m *wmodel) inspect() (int, []string) {
	ctx := context.Background()
	waiters := []string{}
	if m.kind == inspect.KindMutex {
		in, err := m.engines[0].Inspect(ctx, m.name)
		if err != nil {
			m.fatalf("Inspect() = %v", err)
		}
		for _, w := range in.Waiters {
			waiters = append(waiters, w.Owner)
		}
		if in.Holder == nil {
			return 0, waiters
		}
		return 1, waiters
	}
	in, err := m.engines[0].InspectFamily(ctx, m.kind, m.name)
	if err != nil {
		m.fatalf("InspectFamily() = %v", err)
	}
	for _, w := range in.Waiters {
		waiters = append(waiters, w.Owner)
	}
	return len(in.Holders), waiters
}

// cleanup gives up the waits and releases the holds left. A waiter whose
// result a failure took gives none.
func (m *wmodel) cleanup() {
	for _, e := range m.queue {
		if !e.held {
			e.cancel()
			select {
			case err := <-e.done:
				e.held = err == nil
			case <-time.After(20 * time.Second):
			}
		}
	}
	for _, e := range m.queue {
		if e.held {
			_ = e.h.Unlock()
		}
	}
}
