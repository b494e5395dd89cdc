package lockertest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/driver"
	"github.com/orthrus-go/orthrus/locker/inspect"
)

// FaultHarness is what RunFaults needs: an engine over a server of its own,
// which the suite freezes and kills, so the factory starts a server for
// each call.
type FaultHarness struct {
	Harness
	// Pause freezes the server (SIGSTOP) and returns once it no longer
	// answers; Resume thaws it.
	Pause, Resume func() error
	// Kill ends the server at once (SIGKILL).
	Kill func() error
	// RequestTimeout is the longest the engine waits for the answer to a
	// request when the caller's context does not end sooner: TryLock's
	// bound. Keep it short (a second or so): the suite waits it out.
	RequestTimeout time.Duration
}

// FaultFactory starts a server and returns an engine over it. The suite
// closes the engine; the factory stops the server in t.Cleanup.
type FaultFactory func(t *testing.T) FaultHarness

// Bounds of the fault suite.
const (
	// returnWithin bounds how long after its context ends a call returns,
	// beyond how late the process got to run then (see probe).
	returnWithin = 100 * time.Millisecond
	// callWithin bounds the other calls whose own deadline passed (Ping,
	// TryLockTimeout, Acquire): looser, as they also build their error on
	// a loaded machine.
	callWithin = 2 * returnWithin
	// refusedWithin bounds how long a call takes to fail against a killed
	// server, which the engine must tell at once, not at a timeout.
	refusedWithin = 250 * time.Millisecond
	// faultWait is the caller's budget in the checks against a server that
	// does not answer: longer than driver.OutageAfter, shorter than every
	// engine's RequestTimeout.
	faultWait = driver.OutageAfter + 200*time.Millisecond
	// shortWait is a budget that ends before driver.OutageAfter.
	shortWait = driver.OutageAfter / 3
)

// Acquirer is the raw acquisition path of the Lockers every engine returns
// (locker.NewHandle's): when ctx ends, its error wraps ctx.Err(), and also
// ErrUnavailable when the engine had not answered for driver.OutageAfter.
type Acquirer interface {
	Acquire(ctx context.Context, wait bool) (bool, error)
}

// RunFaults checks what callers see of an engine whose server stops
// answering (frozen) or dies (killed): unreachable for driver.OutageAfter
// is never contention (a shorter wait only runs out of time), LockCtx
// returns exactly ctx.Err() within returnWithin of its end, and a
// cancelled wait returns at once and still leaves nothing behind once the
// server is back.
func RunFaults(t *testing.T, f FaultFactory) {
	cases := []struct {
		name string
		fn   func(t *testing.T, f FaultFactory)
	}{
		{"Paused", testPaused},
		{"Killed", testKilled},
		{"CancelWhilePaused", testCancelWhilePaused},
		{"UnlockWhilePaused", testUnlockWhilePaused},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { guard(t, func() { c.fn(t, f) }) })
	}
}

// openFaults calls the factory, closes the engine when the subtest ends
// and thaws the server before that, should a check fail while it is frozen.
func openFaults(t *testing.T, f FaultFactory) (FaultHarness, func()) {
	t.Helper()
	h := f(t)
	if h.Pause == nil || h.Resume == nil || h.Kill == nil || h.RequestTimeout <= 0 {
		t.Fatalf("FaultHarness needs Pause, Resume, Kill and a positive RequestTimeout")
	}
	paused := false
	t.Cleanup(func() {
		if paused {
			_ = h.Resume()
		}
		if err := h.Engine.Close(); err != nil && !errors.Is(err, locker.ErrUnavailable) {
			t.Errorf("Engine.Close() = %v", err)
		}
	})
	pause := func() {
		t.Helper()
		if err := h.Pause(); err != nil {
			t.Fatalf("Pause() = %v", err)
		}
		paused = true
	}
	h.Resume = func(resume func() error) func() error {
		return func() error {
			paused = false
			return resume()
		}
	}(h.Resume)
	return h, pause
}

// warm makes one acquisition, so that connections, subscriptions and
// leases exist before the fault, as in a process that has been running.
func warm(t *testing.T, e locker.Engine, name string) {
	t.Helper()
	l := newLocker(t, e, name)
	mustLock(t, l)
	mustUnlock(t, l)
}

func acquirer(t *testing.T, l locker.Locker) Acquirer {
	t.Helper()
	a, ok := l.(Acquirer)
	if !ok {
		t.Fatalf("%T has no Acquire(ctx, wait) method", l)
	}
	return a
}

// unreachable checks what every call sees of a server that does not answer
// (killed: refused also wrapping ErrRefused, and quickly): the mutex's,
// each read-write lock side's and a permit's.
func unreachable(t *testing.T, h FaultHarness, name string, killed bool) {
	t.Helper()
	faultCheck{t: t, killed: killed}.ping(h.Engine)
	for _, kind := range []inspect.Kind{inspect.KindMutex, inspect.KindRead, inspect.KindWrite, inspect.KindPermit} {
		t.Run(kind.String(), func(t *testing.T) {
			unreachableHandle(t, h, newHandle(t, h.Engine, kind, name), killed)
		})
	}
}

// newHandle returns a new owner's handle of kind on name (for a permit,
// both permits of a semaphore of 2).
func newHandle(t *testing.T, e locker.Engine, kind inspect.Kind, name string) locker.Handle {
	t.Helper()
	switch kind {
	case inspect.KindRead:
		return newRW(t, e, name).ReadLock()
	case inspect.KindWrite:
		return newRW(t, e, name).WriteLock()
	case inspect.KindPermit:
		p, err := newSem(t, e, name, 2).NewPermit(2)
		if err != nil {
			t.Fatalf("NewPermit(2) = %v", err)
		}
		return p
	}
	return newLocker(t, e, name)
}

// unreachableHandle checks each acquisition call of l against the server
// that does not answer.
func unreachableHandle(t *testing.T, h FaultHarness, l locker.Handle, killed bool) {
	t.Helper()
	c := faultCheck{t: t, killed: killed}
	c.tryLock(l, h.RequestTimeout)
	c.tryLockTimeout(l)
	for _, cause := range []error{context.DeadlineExceeded, context.Canceled} {
		c.lockCtx(l, cause)
	}
	for _, wait := range []bool{false, true} {
		c.acquire(l, wait)
	}
	if !killed {
		c.ranOut(l)
	}
	if got := l.Token(); got != 0 {
		t.Errorf("Token() after failed acquisitions = %d; want 0", got)
	}
}

// faultCheck checks one call against a server that does not answer.
type faultCheck struct {
	t      *testing.T
	killed bool // else frozen
}

// failFast checks, against a killed server, that a call was refused, and
// quickly.
func (c faultCheck) failFast(what string, err error, took time.Duration) {
	c.t.Helper()
	if !c.killed {
		return
	}
	if !errors.Is(err, locker.ErrRefused) {
		c.t.Errorf("%s against a killed server = %v; want it to wrap ErrRefused", what, err)
	}
	if took > refusedWithin {
		c.t.Errorf("%s against a killed server took %v; want within %v", what, took, refusedWithin)
	}
}

// ping: at its deadline when frozen, at once when killed.
func (c faultCheck) ping(e locker.Engine) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), faultWait)
	p, start := newProbe(faultWait), time.Now()
	err := e.Ping(ctx)
	took := time.Since(start)
	cancel()
	if !errors.Is(err, locker.ErrUnavailable) {
		c.t.Errorf("Ping() = %v; want ErrUnavailable", err)
	}
	if over, want := p.over(took, callWithin); over {
		c.t.Errorf("Ping(%v deadline) returned after %v; want %s", faultWait, took, want)
	}
	c.failFast("Ping()", err, took)
}

// tryLock: an error, never (false, nil), within the request timeout.
func (c faultCheck) tryLock(l locker.Locker, requestTimeout time.Duration) {
	c.t.Helper()
	start := time.Now()
	ok, err := l.TryLock()
	took := time.Since(start)
	if ok || !errors.Is(err, locker.ErrUnavailable) {
		c.t.Errorf("TryLock() = %v, %v; want false, ErrUnavailable", ok, err)
	}
	if limit := requestTimeout + 500*time.Millisecond; took > limit {
		c.t.Errorf("TryLock() returned after %v; want within the request timeout %v", took, requestTimeout)
	}
	c.failFast("TryLock()", err, took)
}

// tryLockTimeout longer than driver.OutageAfter, shorter than the request
// timeout: ran out without an answer, so an error.
func (c faultCheck) tryLockTimeout(l locker.Locker) {
	c.t.Helper()
	p, start := newProbe(faultWait), time.Now()
	ok, err := l.TryLockTimeout(faultWait)
	took := time.Since(start)
	if ok || !errors.Is(err, locker.ErrUnavailable) {
		c.t.Errorf("TryLockTimeout(%v) = %v, %v; want false, ErrUnavailable", faultWait, ok, err)
	}
	if over, want := p.over(took, callWithin); over {
		c.t.Errorf("TryLockTimeout(%v) returned after %v; want %s", faultWait, took, want)
	}
	c.failFast("TryLockTimeout()", err, took)
}

// lockCtx: exactly ctx.Err() within returnWithin of the deadline or the
// cancellation (cause), or, before that, an error wrapping ErrUnavailable.
func (c faultCheck) lockCtx(l locker.Locker, cause error) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), faultWait)
	if cause == context.Canceled {
		ctx, cancel = context.WithCancel(context.Background())
		time.AfterFunc(faultWait, cancel)
	}
	p, start := newProbe(faultWait), time.Now()
	err := l.LockCtx(ctx)
	took := time.Since(start)
	ended := ctx.Err() != nil
	cancel()
	over, want := p.over(took, returnWithin)
	switch {
	case ended && err != cause:
		c.t.Errorf("LockCtx() after its context ended = %v; want %v itself", err, cause)
	case !ended && !errors.Is(err, locker.ErrUnavailable):
		c.t.Errorf("LockCtx() before its context ended = %v; want ErrUnavailable", err)
	case ended && over:
		c.t.Errorf("LockCtx() returned after %v, its context ending (%v) after %v; want %s", took, cause, faultWait, want)
	}
	c.failFast("LockCtx()", err, took)
}

// acquire: the raw path says why.
func (c faultCheck) acquire(l locker.Locker, wait bool) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), faultWait)
	p, start := newProbe(faultWait), time.Now()
	ok, err := acquirer(c.t, l).Acquire(ctx, wait)
	took := time.Since(start)
	ended := ctx.Err() != nil
	cancel()
	if ok || !errors.Is(err, locker.ErrUnavailable) || (ended && !errors.Is(err, context.DeadlineExceeded)) {
		c.t.Errorf("Acquire(ctx, %v) = %v, %v; want false and an error wrapping ErrUnavailable (and DeadlineExceeded once ctx ended)", wait, ok, err)
	}
	if over, want := p.over(took, callWithin); over {
		c.t.Errorf("Acquire(ctx, %v) returned after %v; want %s", wait, took, want)
	}
	c.failFast("Acquire()", err, took)
}

// ranOut: a wait shorter than driver.OutageAfter on a server that does not
// answer ran out of time, as on a held name; only a longer one tells an
// outage.
func (c faultCheck) ranOut(l locker.Locker) {
	c.t.Helper()
	p, start := newProbe(shortWait), time.Now()
	ok, err := l.TryLockTimeout(shortWait)
	took := time.Since(start)
	if over, want := p.over(took, callWithin); ok || err != nil || over {
		c.t.Errorf("TryLockTimeout(%v) = %v, %v after %v; want false, nil %s", shortWait, ok, err, took, want)
	}
	for _, wait := range []bool{false, true} {
		ctx, cancel := context.WithTimeout(context.Background(), shortWait)
		ok, err := acquirer(c.t, l).Acquire(ctx, wait)
		cancel()
		if ok || !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, locker.ErrUnavailable) {
			c.t.Errorf("Acquire(%v deadline, %v) = %v, %v; want false, DeadlineExceeded and not ErrUnavailable", shortWait, wait, ok, err)
		}
	}
}

func testPaused(t *testing.T, f FaultFactory) {
	h, pause := openFaults(t, f)
	name := lockName(t, "p")
	warm(t, h.Engine, name)
	pause()
	unreachable(t, h, name, false)
	if err := h.Resume(); err != nil {
		t.Fatalf("Resume() = %v", err)
	}
	// Back to normal once it answers; nothing of the failed attempts holds
	// the name.
	l := newLocker(t, h.Engine, name)
	eventually(t, 20*time.Second, "TryLock() true after the server thawed", func() bool {
		ok, _ := l.TryLock()
		return ok
	})
	mustUnlock(t, l)
}

func testKilled(t *testing.T, f FaultFactory) {
	h, _ := openFaults(t, f)
	name := lockName(t, "k")
	warm(t, h.Engine, name)
	if err := h.Kill(); err != nil {
		t.Fatalf("Kill() = %v", err)
	}
	unreachable(t, h, name, true)
}

// testCancelWhilePaused: a waiter cancelled while the server is frozen
// returns at once, and its key or node goes once the server answers again,
// so the next owner is not queued behind it: a mutex waiter, a reader
// behind a writer and a permit waiter.
func testCancelWhilePaused(t *testing.T, f FaultFactory) {
	h, pause := openFaults(t, f)
	for _, kind := range []inspect.Kind{inspect.KindMutex, inspect.KindRead, inspect.KindPermit} {
		t.Run(kind.String(), func(t *testing.T) { cancelWhilePaused(t, h, pause, kind) })
	}
}

func cancelWhilePaused(t *testing.T, h FaultHarness, pause func(), kind inspect.Kind) {
	name := lockName(t, "c")
	e := h.Engine
	// A reader waits behind a writer, and the next owner is a writer,
	// whom a reader left queued would keep out.
	holderKind := kind
	if kind == inspect.KindRead {
		holderKind = inspect.KindWrite
	}
	holder, waiter, next := newHandle(t, e, holderKind, name), newHandle(t, e, kind, name), newHandle(t, e, holderKind, name)
	mustLock(t, holder)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- waiter.LockCtx(ctx) }()
	waiting := func() (int, error) { return h.Residue(context.Background(), name) }
	if kind != inspect.KindMutex {
		waiting = func() (int, error) {
			in, err := familyInspector(t, e).InspectFamily(context.Background(), kind, name)
			return len(in.Waiters), err
		}
	}
	if kind != inspect.KindMutex || h.Residue != nil {
		eventually(t, 10*time.Second, "the waiter visible on the server", func() bool {
			n, err := waiting()
			return err == nil && n > 0
		})
	}
	pause()
	p, start := newProbe(0), time.Now()
	cancel()
	err := <-done
	took := time.Since(start)
	if over, want := p.over(took, returnWithin); over {
		t.Errorf("LockCtx() returned %v after its cancellation with the server frozen; want %s", took, want)
	}
	if err != context.Canceled {
		t.Errorf("LockCtx() cancelled with the server frozen = %v; want context.Canceled itself", err)
	}
	if err := h.Resume(); err != nil {
		t.Fatalf("Resume() = %v", err)
	}
	if kind != inspect.KindMutex || h.Residue != nil {
		eventually(t, 10*time.Second, "nothing of the cancelled waiter left once the server answers", func() bool {
			n, err := waiting()
			return err == nil && n == 0
		})
	}
	mustUnlock(t, holder)
	// Nothing stands in the queue: the next owner gets it at once.
	ok, err := next.TryLockTimeout(5 * time.Second)
	if !ok || err != nil {
		t.Fatalf("TryLockTimeout(5s) after the holder left = %v, %v; want true, nil", ok, err)
	}
	mustUnlock(t, next)
	// The background cleanup is the engine's: goleak checks that Close
	// stopped it.
}

// testUnlockWhilePaused: a release on a frozen server returns with an
// error wrapping ErrUnavailable within its bound, whatever the engine's
// request timeout, for every kind: Unlock within driver.DefaultReleaseWait,
// locker.Release when its context ends. The release goes on in the
// background: once the server answers again, the name is free long before
// the hold's TTL would have freed it.
func testUnlockWhilePaused(t *testing.T, f FaultFactory) {
	h, pause := openFaults(t, f)
	type release struct {
		kind inspect.Kind
		name string
		l    locker.Handle
		how  string
		wait time.Duration // how long the caller waits for an answer
		call func(locker.Handle) error
	}
	unlock := func(l locker.Handle) error { return l.Unlock() }
	bounded := func(l locker.Handle) error {
		ctx, cancel := context.WithTimeout(context.Background(), faultWait)
		defer cancel()
		return locker.Release(ctx, l)
	}
	var releases []release
	for _, kind := range []inspect.Kind{inspect.KindMutex, inspect.KindRead, inspect.KindWrite, inspect.KindPermit} {
		releases = append(releases,
			release{kind: kind, how: "Unlock()", wait: driver.DefaultReleaseWait, call: unlock},
			release{kind: kind, how: "Release(ctx)", wait: faultWait, call: bounded})
	}
	for i := range releases {
		r := &releases[i]
		r.name = lockName(t, fmt.Sprintf("u%d", i))
		r.l = newHandle(t, h.Engine, r.kind, r.name)
		mustLock(t, r.l)
	}
	pause()
	errs := make(chan error, len(releases))
	for _, r := range releases { // at once: the server stays frozen for one wait only
		go func() {
			p, start := newProbe(r.wait), time.Now()
			err := r.call(r.l)
			took := time.Since(start)
			over, want := p.over(took, callWithin)
			switch {
			case !errors.Is(err, locker.ErrUnavailable):
				errs <- fmt.Errorf("%s %s on a frozen server = %v; want ErrUnavailable", r.kind, r.how, err)
			case over:
				errs <- fmt.Errorf("%s %s on a frozen server returned after %v; want %s", r.kind, r.how, took, want)
			default:
				errs <- nil
			}
		}()
	}
	for range releases {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if err := h.Resume(); err != nil {
		t.Fatalf("Resume() = %v", err)
	}
	for _, r := range releases {
		next := newHandle(t, h.Engine, r.kind, r.name)
		eventually(t, 10*time.Second, r.kind.String()+" released in the background once the server answers", func() bool {
			ok, _ := next.TryLock()
			return ok
		})
		mustUnlock(t, next)
	}
}

// TryLockFrozen checks that TryLock on e, whose server pause freezes,
// returns an error wrapping ErrUnavailable within bound (the engine's
// request timeout at its defaults: driver.DefaultRequestTimeout) plus
// scheduling slack. The server is resumed before it returns.
func TryLockFrozen(t *testing.T, e locker.Engine, pause, resume func() error, bound time.Duration) {
	t.Helper()
	l, err := e.NewLocker(t.Name())
	if err != nil {
		t.Fatal(err)
	}
	mustLock(t, l)
	mustUnlock(t, l)
	if err := pause(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := resume(); err != nil {
			t.Error(err)
		}
	}()
	began := time.Now()
	ok, err := l.TryLock()
	took := time.Since(began)
	t.Logf("TryLock() on a frozen server: %v, %v after %v", ok, err, took)
	if ok || !errors.Is(err, locker.ErrUnavailable) {
		t.Errorf("TryLock() on a frozen server = %v, %v; want false, ErrUnavailable", ok, err)
	}
	if limit := bound + 500*time.Millisecond; took > limit {
		t.Errorf("TryLock() on a frozen server returned after %v; want within %v", took, limit)
	}
}
