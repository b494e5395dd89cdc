package redis_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/orthrus-go/orthrus/engines/redis"
	"github.com/orthrus-go/orthrus/internal/testserver"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/inspect"
	"github.com/orthrus-go/orthrus/locker/lockertest"
)

func familyFactory(c goredis.UniversalClient) lockertest.Factory {
	return func(t *testing.T) lockertest.Harness { return harness(t, c) }
}

func TestRWConformanceSingle(t *testing.T) { lockertest.RunRW(t, familyFactory(newSingle(t))) }

func TestRWConformanceCluster(t *testing.T) { lockertest.RunRW(t, familyFactory(newCluster(t))) }

func TestSemaphoreConformanceSingle(t *testing.T) {
	lockertest.RunSemaphore(t, familyFactory(newSingle(t)))
}

func TestSemaphoreConformanceCluster(t *testing.T) {
	lockertest.RunSemaphore(t, familyFactory(newCluster(t)))
}

// A user given only ACLCommands, its keys and its channels runs the
// family's suites too.
func TestFamilyConformanceRestrictedUser(t *testing.T) {
	s := testserver.Redis(t)
	appACL(t, s, "conformance")
	c := goredis.NewClient(&goredis.Options{Addr: s.Addr(), Username: "conformance", Password: "conformance-secret"})
	t.Cleanup(func() { _ = c.Close() })
	lockertest.RunRW(t, familyFactory(c))
	lockertest.RunSemaphore(t, familyFactory(c))
}

// attemptHook counts the acquire attempts of one kind a client sends.
type attemptHook struct {
	sha string
	n   atomic.Int64
}

func (h *attemptHook) DialHook(next goredis.DialHook) goredis.DialHook { return next }
func (h *attemptHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		err := next(ctx, cmd)
		if args := cmd.Args(); len(args) > 1 && cmd.Name() == "evalsha" {
			if sha, ok := args[1].(*string); ok && *sha == h.sha {
				h.n.Add(1) // answered
			}
		}
		return err
	}
}
func (h *attemptHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}

// countedEngine is an engine over a client of its own whose acquire
// attempts of kind are counted.
func countedEngine(t *testing.T, kind inspect.Kind) (*redis.Engine, *attemptHook) {
	c := newSingle(t)
	hook := &attemptHook{sha: redis.AcquireSHA(kind)}
	c.AddHook(hook)
	e := newEngine(t, c)
	t.Cleanup(func() { _ = e.Close() })
	return e, hook
}

func openEngine(t *testing.T) *redis.Engine {
	e := newEngine(t, newSingle(t))
	t.Cleanup(func() { _ = e.Close() })
	return e
}

func lockNow(t *testing.T, l locker.Locker) {
	t.Helper()
	if err := l.Lock(); err != nil {
		t.Fatalf("Lock() = %v", err)
	}
}

func unlockNow(t *testing.T, l locker.Locker) {
	t.Helper()
	if err := l.Unlock(); err != nil {
		t.Fatalf("Unlock() = %v", err)
	}
}

// lockLater runs LockCtx on l with a 20s budget and sends its result.
func lockLater(l locker.Locker) <-chan error {
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		done <- l.LockCtx(ctx)
	}()
	return done
}

func await(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waiting counts the waiters of kind that InspectFamily lists for the
// read-write lock or the semaphore name.
func waiting(t *testing.T, e *redis.Engine, kind inspect.Kind, name string) int {
	t.Helper()
	in, err := e.InspectFamily(context.Background(), kind, name)
	if err != nil {
		t.Fatalf("InspectFamily() = %v", err)
	}
	n := 0
	for _, w := range in.Waiters {
		if w.Kind == kind {
			n++
		}
	}
	return n
}

func waitingWriters(t *testing.T, e *redis.Engine, name string) int {
	t.Helper()
	return waiting(t, e, inspect.KindWrite, name)
}

// Every hold of the family is its own lease: removed on the server, its
// holder sees Lost at its next renewal and Unlock says ErrLockLost.
func TestFamilyLost(t *testing.T) {
	c := newSingle(t)
	e := newEngine(t, c)
	defer e.Close()
	ctx := context.Background()
	opt := locker.WithTTL(900 * time.Millisecond)
	for _, tc := range []struct {
		kind inspect.Kind
		key  int // the key of FamilyKeys holding the hold
		hold func(name string) locker.Handle
	}{
		{inspect.KindWrite, 0, func(name string) locker.Handle {
			l, _ := e.NewRWLock(name, opt)
			return l.WriteLock()
		}},
		{inspect.KindRead, 1, func(name string) locker.Handle {
			l, _ := e.NewRWLock(name, opt)
			return l.ReadLock()
		}},
		{inspect.KindPermit, 0, func(name string) locker.Handle {
			s, _ := e.NewSemaphore(name, 2, opt)
			p, _ := s.NewPermit(1)
			return p
		}},
	} {
		t.Run(tc.kind.String(), func(t *testing.T) {
			name := t.Name()
			h := tc.hold(name)
			lockNow(t, h)
			if err := c.Del(ctx, e.FamilyKeys(tc.kind, name)[tc.key]).Err(); err != nil {
				t.Fatal(err)
			}
			lockertest.WantLost(t, h, "the hold deleted")
		})
	}
}

// A reader that queued while a writer held the lock goes before a writer
// that queued after it; that writer is not woken by the release.
//
// Both are parked first: a writer still trying when the lock comes free
// may get in before the reader (the lock is writer-preferring, not
// strictly fair).
func TestRWReaderQueuedFirstGoesFirst(t *testing.T) {
	holder := openEngine(t)
	e := openEngine(t)
	name := t.Name()
	a, _ := holder.NewRWLock(name)
	r, _ := e.NewRWLock(name)
	w, _ := e.NewRWLock(name)
	lockNow(t, a.WriteLock())
	rdone := lockLater(r.ReadLock())
	await(t, "the reader parked", func() bool { return e.Parked(inspect.KindRead, name) == 1 })
	wdone := lockLater(w.WriteLock())
	await(t, "the writer parked", func() bool {
		return e.Parked(inspect.KindWrite, name) == 2 && waitingWriters(t, holder, name) == 1
	})
	unlockNow(t, a.WriteLock())
	select {
	case err := <-rdone:
		if err != nil {
			t.Fatalf("reader LockCtx() = %v", err)
		}
	case err := <-wdone:
		t.Fatalf("the writer that queued second got in first (%v)", err)
	case <-time.After(5 * time.Second):
		t.Fatalf("reader not granted within 5s of the writer's release")
	}
	unlockNow(t, r.ReadLock())
	select {
	case err := <-wdone:
		if err != nil {
			t.Fatalf("writer LockCtx() = %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("writer not granted within 5s of the last reader's release")
	}
	if r.ReadLock().Token() != 0 || w.WriteLock().Token() <= a.WriteLock().Token() {
		t.Errorf("writer token %d; want above the first writer's", w.WriteLock().Token())
	}
	unlockNow(t, w.WriteLock())
}

// A release wakes only the waiters that can proceed: writers parked behind
// a reader, or permit waiters behind a permit, go one at a time, each
// woken once, instead of all trying at every release.
func TestFamilyNoHerd(t *testing.T) {
	const waiters = 16
	for _, kind := range []inspect.Kind{inspect.KindWrite, inspect.KindPermit} {
		t.Run(kind.String(), func(t *testing.T) {
			holder := openEngine(t)
			e, attempts := countedEngine(t, kind)
			name := t.Name()
			var held locker.Handle
			var queued []locker.Handle
			if kind == inspect.KindWrite {
				l, _ := holder.NewRWLock(name)
				held = l.ReadLock()
				for range waiters {
					l, _ := e.NewRWLock(name)
					queued = append(queued, l.WriteLock())
				}
			} else {
				s, _ := holder.NewSemaphore(name, 1)
				held, _ = s.NewPermit(1)
				for range waiters {
					s, _ := e.NewSemaphore(name, 1)
					p, _ := s.NewPermit(1)
					queued = append(queued, p)
				}
			}
			lockNow(t, held)
			var wg sync.WaitGroup
			errs := make(chan error, waiters)
			for _, l := range queued {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if err := <-lockLater(l); err != nil {
						errs <- err
						return
					}
					errs <- l.Unlock()
				}()
			}
			// Each has made its first attempt; the writers show as waiting.
			await(t, "every waiter's first attempt", func() bool { return attempts.n.Load() >= waiters })
			if kind == inspect.KindWrite {
				await(t, "the writers waiting", func() bool { return waitingWriters(t, holder, name) == waiters })
			}
			unlockNow(t, held)
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
			// A first attempt, one after subscribing, one when woken: 3n; a
			// herd would make every waiter try at every release (n²/2 more).
			if got := attempts.n.Load(); got > 4*waiters {
				t.Errorf("%d acquire attempts for %d waiters handed the lock one by one; want at most %d", got, waiters, 4*waiters)
			}
			t.Logf("%d attempts for %d waiters", attempts.n.Load(), waiters)
		})
	}
}

// A release wakes, by ticket, exactly the waiters the rule grants, in
// whichever process they wait: writers and permit waiters of two
// processes, queued in turns, go one by one, each at once (the fallback
// poll is TTL/3, 10s) and each woken once, not every waiter of the
// processes at every release.
func TestFamilyWakesByTicket(t *testing.T) {
	const waiters = 16 // half in each process
	for _, kind := range []inspect.Kind{inspect.KindWrite, inspect.KindPermit} {
		t.Run(kind.String(), func(t *testing.T) {
			holder := openEngine(t)
			a, attemptsA := countedEngine(t, kind)
			b, attemptsB := countedEngine(t, kind)
			name := t.Name()
			newHandle := func(e *redis.Engine) locker.Handle {
				if kind == inspect.KindWrite {
					l, _ := e.NewRWLock(name)
					return l.WriteLock()
				}
				s, _ := e.NewSemaphore(name, 1)
				p, _ := s.NewPermit(1)
				return p
			}
			held := newHandle(holder)
			lockNow(t, held)
			errs := make(chan error, waiters)
			for i := range waiters {
				l := newHandle([]*redis.Engine{a, b}[i%2])
				go func() {
					if err := <-lockLater(l); err != nil {
						errs <- err
						return
					}
					errs <- l.Unlock()
				}()
				// Each queues before the next: the tickets alternate
				// between the processes.
				await(t, "the waiter queued", func() bool { return waiting(t, holder, kind, name) == i+1 })
			}
			await(t, "every waiter parked", func() bool { return a.Parked(kind, name)+b.Parked(kind, name) == waiters })
			before := attemptsA.n.Load() + attemptsB.n.Load()
			start := time.Now()
			unlockNow(t, held)
			for range waiters {
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
			}
			if d := time.Since(start); d > 3*time.Second {
				t.Errorf("%d hand-offs took %v; want each at once, not at the TTL/3 poll", waiters, d)
			}
			// One attempt when woken each, and a few spares: everybody at
			// every release would be n²/2.
			if got := attemptsA.n.Load() + attemptsB.n.Load() - before; got > 2*waiters {
				t.Errorf("%d acquire attempts for %d waiters woken one by one; want at most %d", got, waiters, 2*waiters)
			}
		})
	}
}

// A waiting writer that dies leaves an intent that expires: readers held
// back by it get in then.
func TestRWDeadWaitingWriterExpires(t *testing.T) {
	ctx := context.Background()
	c := newSingle(t)
	e := newEngine(t, c)
	defer e.Close()
	name := t.Name()
	now, err := c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	const left = 700 * time.Millisecond
	ww := e.FamilyKeys(inspect.KindWrite, name)[2]
	if err := c.ZAdd(ctx, ww, goredis.Z{Score: float64(now.Add(left).UnixMilli()), Member: "1:ghost"}).Err(); err != nil {
		t.Fatal(err)
	}
	l, _ := e.NewRWLock(name)
	if ok, err := l.ReadLock().TryLock(); ok || err != nil {
		t.Fatalf("read TryLock() behind a waiting writer = %v, %v; want false, nil", ok, err)
	}
	start := time.Now()
	if err := <-lockLater(l.ReadLock()); err != nil {
		t.Fatalf("read LockCtx() = %v", err)
	}
	if d := time.Since(start); d > left+2*time.Second {
		t.Errorf("reader got in after %v; want about %v, when the dead writer's intent expired", d, left)
	}
	unlockNow(t, l.ReadLock())
}

// Raising the count wakes a waiter whose permits now fit.
func TestSemaphoreSetPermitsWakes(t *testing.T) {
	holder := openEngine(t)
	e, attempts := countedEngine(t, inspect.KindPermit)
	name := t.Name()
	s1, _ := holder.NewSemaphore(name, 1)
	held, _ := s1.NewPermit(1)
	lockNow(t, held)
	s2, _ := e.NewSemaphore(name, 1)
	p, _ := s2.NewPermit(1)
	done := lockLater(p)
	await(t, "the waiter's attempts", func() bool { return attempts.n.Load() >= 2 })
	if err := holder.SetPermits(context.Background(), name, 2); err != nil {
		t.Fatalf("SetPermits(2) = %v", err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("LockCtx() = %v", err)
		}
	case <-time.After(5 * time.Second): // the holder's TTL is 30s
		t.Fatalf("waiter not granted within 5s of SetPermits(2)")
	}
	unlockNow(t, p)
	unlockNow(t, held)
}

// The semaphore's count outlives its holds; nothing else of the family
// stays once released, and cancelled waits leave no waiter's entry and no
// subscription.
func TestFamilyLeavesNothing(t *testing.T) {
	ctx := context.Background()
	c := newSingle(t)
	e := newEngine(t, c)
	defer e.Close()
	name := t.Name()
	holder, _ := e.NewRWLock(name)
	waiter, _ := e.NewRWLock(name)
	sem, _ := e.NewSemaphore(name, 1)
	permit, _ := sem.NewPermit(1)
	other, _ := sem.NewPermit(1)
	lockNow(t, holder.WriteLock())
	lockNow(t, permit)
	for _, l := range []locker.Locker{waiter.ReadLock(), waiter.WriteLock(), other} {
		cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		if err := l.LockCtx(cctx); err != context.DeadlineExceeded {
			t.Errorf("LockCtx() while held = %v; want context.DeadlineExceeded", err)
		}
		cancel()
	}
	rw, sm := e.FamilyKeys(inspect.KindWrite, name), e.FamilyKeys(inspect.KindPermit, name)
	channels := []string{rw[0] + ":wake", sm[0] + ":wake"}
	await(t, "no waiting writer and no subscription", func() bool {
		subs, err := c.PubSubNumSub(ctx, channels...).Result()
		return err == nil && subs[channels[0]]+subs[channels[1]] == 0 && c.Exists(ctx, rw[2], rw[4], sm[3]).Val() == 0
	})
	unlockNow(t, holder.WriteLock())
	unlockNow(t, permit)
	if n := c.Exists(ctx, rw[0], rw[1], rw[2], rw[4], sm[0], sm[3]).Val(); n != 0 {
		t.Errorf("%d of the writer, readers, waiting writers and readers, permit and permit waiter keys left after release; want 0", n)
	}
	if ttl := c.PTTL(ctx, rw[3]).Val(); ttl <= 0 {
		t.Errorf("PTTL of the fence counter = %v; want it to expire", ttl)
	}
	if v, ttl := c.Get(ctx, sm[1]).Val(), c.PTTL(ctx, sm[1]).Val(); v != "1" || ttl != -1 {
		t.Errorf("count key = %q with PTTL %v; want \"1\" with none", v, ttl)
	}
}

// A mismatch names both counts and is not an outage.
func TestSemaphoreMismatchError(t *testing.T) {
	e := openEngine(t)
	name := t.Name()
	s3, _ := e.NewSemaphore(name, 3)
	p := lockertestTry(t, s3)
	s5, _ := e.NewSemaphore(name, 5)
	_, ok, err := s5.TryAcquire(1)
	if ok || !errors.Is(err, locker.ErrPermitsMismatch) || errors.Is(err, locker.ErrUnavailable) ||
		!strings.Contains(err.Error(), "5") || !strings.Contains(err.Error(), "3") {
		t.Errorf("TryAcquire() on a mismatched count = %v, %v; want false, ErrPermitsMismatch naming 5 and 3, not ErrUnavailable", ok, err)
	}
	unlockNow(t, p)
}

func lockertestTry(t *testing.T, s locker.Semaphore) locker.Handle {
	t.Helper()
	p, ok, err := s.TryAcquire(1)
	if !ok || err != nil {
		t.Fatalf("TryAcquire(1) = %v, %v; want a permit", ok, err)
	}
	return p
}

// A waiter refreshes its entry while it waits, so it stays listed past
// its TTL; a waiter that can no longer reach Redis (its process died, or
// was cut off) drops out of the listing once its TTL has passed.
func TestFamilyWaiterEntryExpires(t *testing.T) {
	const ttl = 600 * time.Millisecond
	for _, kind := range []inspect.Kind{inspect.KindRead, inspect.KindWrite, inspect.KindPermit} {
		t.Run(kind.String(), func(t *testing.T) {
			holder := openEngine(t)
			c := newSingle(t)
			e := newEngine(t, c)
			t.Cleanup(func() { _ = e.Close() })
			name := t.Name()
			var held, waiter locker.Handle
			if kind == inspect.KindPermit {
				s1, _ := holder.NewSemaphore(name, 1)
				s2, _ := e.NewSemaphore(name, 1, locker.WithTTL(ttl))
				held, _ = s1.NewPermit(1)
				waiter, _ = s2.NewPermit(1)
			} else {
				l1, _ := holder.NewRWLock(name)
				l2, _ := e.NewRWLock(name, locker.WithTTL(ttl))
				held, waiter = l1.WriteLock(), l2.ReadLock()
				if kind == inspect.KindWrite {
					waiter = l2.WriteLock()
				}
			}
			lockNow(t, held)
			done := lockLater(waiter)
			await(t, "the waiter listed", func() bool { return waiting(t, holder, kind, name) == 1 })
			time.Sleep(3 * ttl) // the entry would have expired twice without its refreshes
			if n := waiting(t, holder, kind, name); n != 1 {
				t.Fatalf("waiters listed %v after the waiter's TTL, while it waits = %d; want 1", 3*ttl, n)
			}
			// Cut off: its attempts fail, and so does its withdrawal.
			_ = c.Close()
			if err := <-done; err == nil {
				t.Fatalf("LockCtx() with its client closed = nil; want an error")
			}
			start := time.Now()
			await(t, "the cut-off waiter's entry gone", func() bool { return waiting(t, holder, kind, name) == 0 })
			if d := time.Since(start); d > ttl+time.Second {
				t.Errorf("the cut-off waiter listed %v after it failed; want within its TTL %v", d, ttl)
			}
			unlockNow(t, held)
		})
	}
}

// ForceUnlockFamily by the token of a downgrading writer ends both its
// holds; the waiting readers are woken, as a writer's release wakes them.
func TestRWForceUnlockDowngrade(t *testing.T) {
	e := openEngine(t)
	other := openEngine(t)
	name := t.Name()
	w, _ := e.NewRWLock(name, locker.WithOwner("writer"), locker.WithTTL(900*time.Millisecond))
	lockNow(t, w.WriteLock())
	lockNow(t, w.ReadLock())
	r, _ := other.NewRWLock(name, locker.WithOwner("reader"))
	done := lockLater(r.ReadLock())
	await(t, "the reader listed", func() bool { return waiting(t, e, inspect.KindRead, name) == 1 })
	tok := w.WriteLock().Token()
	ended, err := other.ForceUnlockFamily(context.Background(), inspect.KindWrite, name, tok)
	if err != nil {
		t.Fatalf("ForceUnlockFamily(the writer's token) = %v", err)
	}
	if len(ended) != 2 || ended[0].Token != tok || ended[1].Token != tok || ended[0].Kind == ended[1].Kind {
		t.Errorf("ForceUnlockFamily(the writer's token) ended %+v; want its write and read holds", ended)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("waiting reader: LockCtx() = %v", err)
		}
	case <-time.After(5 * time.Second): // the writer's TTL is 900ms, the reader's wait capped at 10s
		t.Fatalf("waiting reader not granted within 5s of the force unlock")
	}
	lockertest.WantLost(t, w.ReadLock(), "the forced-out downgraded read")
	lockertest.WantLost(t, w.WriteLock(), "the forced-out write")
	unlockNow(t, r.ReadLock())
	if _, err := e.ForceUnlockFamily(context.Background(), inspect.KindMutex, name, 0); !errors.Is(err, locker.ErrInvalidArgument) {
		t.Errorf("ForceUnlockFamily(KindMutex) = %v; want ErrInvalidArgument", err)
	}
}
