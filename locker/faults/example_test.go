package faults_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/orthrus-go/orthrus/engines/mem"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/driver"
	"github.com/orthrus-go/orthrus/locker/faults"
	"github.com/orthrus-go/orthrus/switcher"
)

// runReport is the service code under test: it runs the nightly report
// under a lock, on whatever engine the switcher gives it.
func runReport(engines locker.Engine) (string, error) {
	l, err := engines.NewLocker("nightly-report")
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := l.LockCtx(ctx); err != nil {
		return "", err
	}
	defer l.Unlock()
	return "report ran on " + l.Engine(), nil
}

// memEngine is an in-process engine behind a fault wrapper: one server.
func memEngine(name string) *faults.Engine {
	inner, _ := mem.New()
	w, _ := faults.Wrap(inner, faults.WithName(name))
	return w
}

// Test failover in your service: the primary goes down, and the service
// still runs, on the secondary, without an error.
func Example_failover() {
	primary, secondary := memEngine("primary"), memEngine("secondary")
	sw, err := switcher.New([]locker.Engine{primary, secondary},
		switcher.WithBreaker(1, time.Minute), // trip at the first failure
		switcher.WithHealthCheck(5*time.Millisecond, 50*time.Millisecond))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sw.Close() // closes the wrappers and the engines inside

	fmt.Println(runReport(sw))
	primary.Fail()
	fmt.Println(runReport(sw))
	fmt.Println("current:", sw.Current())
	// Output:
	// report ran on primary <nil>
	// report ran on secondary <nil>
	// current: secondary
}

// An engine that stops answering: LockCtx returns the caller's context
// error, while the raw outcome a switcher sees says the engine failed.
func ExampleEngine_Hang() {
	e := memEngine("paused")
	defer e.Close()
	e.Hang()

	l, _ := e.NewLocker("job")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	fmt.Println(l.LockCtx(ctx))
	// A wait longer than OutageAfter with no answer is the engine's
	// failure, not contention.
	ok, err := l.TryLockTimeout(driver.OutageAfter + 10*time.Millisecond)
	fmt.Println(ok, errors.Is(err, locker.ErrUnavailable))
	// Output:
	// context deadline exceeded
	// false true
}

// Holds whose renewals stop getting through are lost one TTL later.
func ExampleEngine_DropRenewals() {
	e := memEngine("flaky")
	defer e.Close()
	// A TTL long enough that a loaded machine does not lose the hold
	// before the fault starts.
	l, _ := e.NewLocker("job", locker.WithTTL(500*time.Millisecond))
	_ = l.Lock()
	e.DropRenewals()
	<-l.Lost()
	fmt.Println(l.Unlock())
	// Output:
	// flaky: unlock "job": locker: lock lost
}
