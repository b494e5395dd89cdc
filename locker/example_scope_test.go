package locker_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/orthrus-go/orthrus/engines/mem"
	"github.com/orthrus-go/orthrus/locker"
)

// A job runs under the lock and stops as soon as the lock is lost: its
// context ends with the loss as its cause. Here the hold expires because
// the (fake) clock of the in-process server jumps past the TTL, as a
// server's would while renewals do not get through.
func ExampleWithLock() {
	clock := clockwork.NewFakeClock()
	store, _ := mem.NewStore(mem.WithClock(clock))
	e, _ := mem.New(mem.WithStore(store))
	defer e.Close()
	l, _ := e.NewLocker("nightly-report", locker.WithTTL(10*time.Second))

	err := locker.WithLock(context.Background(), l, func(ctx context.Context) error {
		fmt.Println("working under token", l.Token())
		clock.Advance(10 * time.Second)
		<-ctx.Done() // a real job selects on it between steps
		fmt.Println("stopped:", context.Cause(ctx))
		return ctx.Err()
	})
	fmt.Println("lost:", errors.Is(err, locker.ErrLockLost))
	// Output:
	// working under token 1
	// stopped: locker: hold of "nightly-report" on "mem" (token 1): locker: lock lost
	// lost: true
}
