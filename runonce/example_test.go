package runonce_test

import (
	"context"
	"fmt"
	"time"

	"github.com/orthrus-go/orthrus/engines/mem"
	"github.com/orthrus-go/orthrus/runonce"
)

// Two hosts run the same schedule; the fast job runs on the first host
// whose schedule fires, and the other host skips it: the name stays held
// for AtLeastFor after the start although the job took a moment.
func ExampleRunner() {
	store, _ := mem.NewStore() // one simulated server for both hosts
	hostA, _ := mem.New(mem.WithStore(store), mem.WithName("host-a"))
	hostB, _ := mem.New(mem.WithStore(store), mem.WithName("host-b"))
	defer hostA.Close()
	defer hostB.Close()

	opts := []runonce.Option{runonce.AtMostFor(time.Minute), runonce.AtLeastFor(100 * time.Millisecond)}
	a, _ := runonce.New(hostA, opts...)
	b, _ := runonce.New(hostB, opts...)
	defer a.Close() // before the engines: waits for AtLeastFor, then releases
	defer b.Close()

	report := func(ctx context.Context) error {
		fmt.Println("report runs; under the lock:", runonce.AssertHeld(ctx) == nil)
		return nil
	}
	ctx := context.Background()
	ran, err := a.Run(ctx, "nightly-report", report)
	fmt.Println("host-a ran it:", ran, err)
	ran, err = b.Run(ctx, "nightly-report", report) // host-b's schedule fires a little later
	fmt.Println("host-b ran it:", ran, err)
	// Output:
	// report runs; under the lock: true
	// host-a ran it: true <nil>
	// host-b ran it: false <nil>
}

// saveReport is code that must only run under the job's lock.
func saveReport(ctx context.Context) error {
	if err := runonce.AssertHeld(ctx); err != nil {
		return err
	}
	return nil // write the report
}

// A unit test of code that asserts it runs under a lock gives it a
// context from HeldForTest.
func ExampleHeldForTest() {
	fmt.Println(saveReport(context.Background()))
	fmt.Println(saveReport(runonce.HeldForTest(context.Background())))
	// Output:
	// runonce: not running under a lock: locker: not held
	// <nil>
}
