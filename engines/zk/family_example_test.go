package zk_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/orthrus-go/orthrus/engines/zk"
	"github.com/orthrus-go/orthrus/locker"
)

func ExampleEngine_NewRWLock() {
	e, err := zk.New([]string{zkAddr}, zk.WithPrefix("/examples"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer e.Close()

	config, _ := e.NewRWLock("config")
	w := config.WriteLock()
	if err := w.Lock(); err != nil {
		fmt.Println(err)
		return
	}
	// ... write the configuration, then downgrade: take the read side,
	// at once, before letting the write side go.
	r := config.ReadLock()
	if err := r.Lock(); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("read token is the write token:", r.Token() == w.Token())
	_ = w.Unlock()

	// Other readers share the lock; writers wait.
	other, _ := e.NewRWLock("config")
	ok, _ := other.ReadLock().TryLock()
	fmt.Println("another reader:", ok)
	ok, _ = other.WriteLock().TryLock()
	fmt.Println("a writer:", ok)
	_ = other.ReadLock().Unlock()

	// Upgrading is refused at once: it could deadlock.
	fmt.Println(errors.Is(config.WriteLock().Lock(), locker.ErrUpgrade))
	_ = r.Unlock()
	// Output:
	// read token is the write token: true
	// another reader: true
	// a writer: false
	// true
}

func ExampleEngine_NewSemaphore() {
	e, err := zk.New([]string{zkAddr}, zk.WithPrefix("/examples"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer e.Close()

	// At most 3 exports at a time across the fleet. The count is stored
	// with the semaphore; an operator changes it with SetPermits.
	exports, _ := e.NewSemaphore("exports", 3)
	big, err := exports.Acquire(context.Background(), 2) // two permits, at once
	if err != nil {
		fmt.Println(err)
		return
	}
	small, ok, _ := exports.TryAcquire(1)
	fmt.Println("third permit:", ok)
	_, ok, _ = exports.TryAcquire(1)
	fmt.Println("fourth permit:", ok)
	_ = small.Unlock()
	_ = big.Unlock()

	// A process opening it with another count is told.
	wrong, _ := e.NewSemaphore("exports", 5)
	_, _, err = wrong.TryAcquire(1)
	fmt.Println(errors.Is(err, locker.ErrPermitsMismatch))
	// Output:
	// third permit: true
	// fourth permit: false
	// true
}
