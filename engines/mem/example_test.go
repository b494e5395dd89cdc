package mem_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/orthrus-go/orthrus/engines/mem"
	"github.com/orthrus-go/orthrus/locker"
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
