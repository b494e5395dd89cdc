package mem_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/orthrus-go/orthrus/engines/mem"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/inspect"
)

func ExampleNew() {
	// One store is one simulated server; two engines on it are two hosts.
	store, _ := mem.NewStore()
	hostA, _ := mem.New(mem.WithStore(store), mem.WithName("host-a"))
	hostB, _ := mem.New(mem.WithStore(store), mem.WithName("host-b"))
	defer hostA.Close()
	defer hostB.Close()

	a, _ := hostA.NewLocker("nightly-report")
	b, _ := hostB.NewLocker("nightly-report")
	ok, err := a.TryLock()
	fmt.Println("host-a:", ok, err)
	ok, err = b.TryLock() // contention is not an error
	fmt.Println("host-b:", ok, err)

	in, _ := hostB.Inspect(context.Background(), "nightly-report")
	fmt.Println("held on", a.Engine(), "by the owner Inspect sees:", in.Holder.Owner != "")
	_ = a.Unlock()
	// Output:
	// host-a: true <nil>
	// host-b: false <nil>
	// held on host-a by the owner Inspect sees: true
}

// work is the code under test: it handles jobs while it holds the lock,
// and stops at once when the lock is lost, so that it never works without
// it.
func work(l locker.Handle, jobs <-chan string) error {
	if err := l.Lock(); err != nil {
		return err
	}
	lost := l.Lost()
	for {
		select {
		case <-lost:
			return fmt.Errorf("stopped: %w", l.Unlock())
		case job, ok := <-jobs:
			if !ok {
				return l.Unlock()
			}
			fmt.Println("handled", job)
		}
	}
}

// Test what your handler does when its lock is lost: with a fake clock, the
// hold expires when the test says so, without sleeping.
func Example_lockLost() {
	clock := clockwork.NewFakeClock()
	store, _ := mem.NewStore(mem.WithClock(clock))
	engine, _ := mem.New(mem.WithStore(store))
	defer engine.Close()

	l, _ := engine.NewLocker("batch", locker.WithTTL(30*time.Second))
	jobs := make(chan string)
	done := make(chan error)
	go func() { done <- work(l, jobs) }()
	jobs <- "a"
	jobs <- "b"

	// 30 seconds pass on the store with no renewal getting through (a
	// stalled process, a partition): the hold expires.
	clock.Advance(30 * time.Second)
	err := <-done
	fmt.Println(err)
	fmt.Println("lock lost:", errors.Is(err, locker.ErrLockLost))
	// Output:
	// handled a
	// handled b
	// stopped: mem: unlock "batch": locker: lock lost
	// lock lost: true
}

// An operator's ForceUnlock hands the lock to the first waiter and tells
// the forced-out owner at once.
func ExampleEngine_ForceUnlock() {
	engine, _ := mem.New()
	defer engine.Close()
	ctx := context.Background()

	stuck, _ := engine.NewLocker("orders/42", locker.WithOwner("stuck-job"))
	next, _ := engine.NewLocker("orders/42", locker.WithOwner("next-job"))
	_ = stuck.Lock()
	granted := make(chan error)
	go func() { granted <- next.Lock() }()

	removed, _ := engine.ForceUnlock(ctx, "orders/42")
	fmt.Println("removed:", removed.Owner)
	fmt.Println("next-job:", <-granted)
	<-stuck.Lost()
	fmt.Println("stuck-job:", stuck.Unlock())
	_ = next.Unlock()
	// Output:
	// removed: stuck-job
	// next-job: <nil>
	// stuck-job: mem: unlock "orders/42": locker: lock lost
}

func ExampleEngine_NewRWLock() {
	e, _ := mem.New()
	defer e.Close()
	cache, _ := e.NewRWLock("price-cache") // the rebuilder
	reader, _ := e.NewRWLock("price-cache")

	_ = cache.WriteLock().Lock()
	ok, _ := reader.ReadLock().TryLock()
	fmt.Println("reader while rebuilding:", ok)

	// Downgrade: keep reading what was just written, let other readers in.
	_ = cache.ReadLock().Lock()
	_ = cache.WriteLock().Unlock()
	ok, _ = reader.ReadLock().TryLock()
	fmt.Println("reader after the downgrade:", ok)

	// Upgrading would deadlock against another reader doing the same.
	_, err := reader.WriteLock().TryLock()
	fmt.Println(errors.Is(err, locker.ErrUpgrade))
	_ = reader.ReadLock().Unlock()
	_ = cache.ReadLock().Unlock()
	// Output:
	// reader while rebuilding: false
	// reader after the downgrade: true
	// true
}

func ExampleEngine_NewSemaphore() {
	e, _ := mem.New()
	defer e.Close()
	// At most 3 exports at once across the fleet; each holder's permits
	// come back if it dies (TTL), and carry a fencing token.
	exports, _ := e.NewSemaphore("exports", 3)
	big, _ := exports.Acquire(context.Background(), 2)
	small, _, _ := exports.TryAcquire(1)
	_, another, _ := exports.TryAcquire(1)
	fmt.Println("big:", big != nil, "small:", small != nil, "another:", another)
	_ = big.Unlock()
	_ = small.Unlock()

	// The count is stored with the semaphore: opening it with another fails.
	wrong, _ := e.NewSemaphore("exports", 5)
	_, _, err := wrong.TryAcquire(1)
	fmt.Println(errors.Is(err, locker.ErrPermitsMismatch))
	// Output:
	// big: true small: true another: false
	// true
}

func ExampleEngine_ForceUnlockFamily() {
	e, _ := mem.New()
	defer e.Close()
	exports, _ := e.NewSemaphore("exports", 2, locker.WithOwner("stuck-job"))
	stuck, _ := exports.Acquire(context.Background(), 2)

	// An operator sees who holds the permits and ends the stuck hold by its
	// token (0 would end every hold of the name).
	in, _ := e.InspectFamily(context.Background(), inspect.KindPermit, "exports")
	h := in.Holders[0]
	fmt.Printf("%s holds %d of %d permits\n", h.Owner, h.Permits, in.Permits)
	ended, _ := e.ForceUnlockFamily(context.Background(), inspect.KindPermit, "exports", h.Token)
	fmt.Println("ended:", len(ended), ended[0].Owner)

	<-stuck.Lost() // the forced-out owner learns it
	fmt.Println(errors.Is(stuck.Unlock(), locker.ErrLockLost))
	// Output:
	// stuck-job holds 2 of 2 permits
	// ended: 1 stuck-job
	// true
}

// Among the waiters of a name, the heaviest is granted first, and waiters
// of one weight in their order of arrival; the holder keeps its hold
// until it lets go.
func ExampleEngine_weight() {
	e, _ := mem.New()
	defer e.Close()
	holder, _ := e.NewLocker("report")
	_ = holder.Lock()

	granted := make(chan string)
	for i, w := range []struct {
		who    string
		weight int
	}{{"batch-1", 1}, {"batch-2", 1}, {"interactive", 5}, {"batch-3", 1}} {
		l, _ := e.NewLocker("report", locker.WithWeight(w.weight))
		go func() {
			_ = l.Lock()
			granted <- w.who
			_ = l.Unlock()
		}()
		// Each waits before the next comes: arrival orders equal weights.
		for waiters(e, "report") <= i {
			runtime.Gosched()
		}
	}
	_ = holder.Unlock()
	for range 4 {
		fmt.Println(<-granted)
	}
	// Output:
	// interactive
	// batch-1
	// batch-2
	// batch-3
}

func waiters(e *mem.Engine, name string) int {
	in, _ := e.Inspect(context.Background(), name)
	return len(in.Waiters)
}
