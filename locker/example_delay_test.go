package locker_test

import (
	"context"
	"fmt"
	"time"

	"github.com/orthrus-go/orthrus/engines/mem"
	"github.com/orthrus-go/orthrus/locker"
)

// A holder whose fixed lease runs out without Unlock (as one that died
// would) bars the name for the delay: the next owner waits lease + delay,
// not just the lease. An Unlock would have freed it at once.
func ExampleWithLockDelay() {
	store, _ := mem.NewStore()
	a, _ := mem.New(mem.WithStore(store)) // two processes sharing a server
	b, _ := mem.New(mem.WithStore(store))
	defer a.Close()
	defer b.Close()
	const lease, delay = 100 * time.Millisecond, 300 * time.Millisecond

	crashed, _ := a.NewLocker("ledger", locker.WithLease(lease), locker.WithLockDelay(delay))
	next, _ := b.NewLocker("ledger", locker.WithLockDelay(delay))
	start := time.Now()
	_ = crashed.Lock() // and never Unlock

	_ = next.LockCtx(context.Background())
	waited := time.Since(start)
	fmt.Println("waited lease + delay:", waited >= lease+delay)
	_ = next.Unlock()

	_, err := a.NewLocker("ledger", locker.WithLockDelay(-time.Second))
	fmt.Println(err)
	// Output:
	// waited lease + delay: true
	// locker: invalid argument: WithLockDelay(-1s): delay must not be negative
}
