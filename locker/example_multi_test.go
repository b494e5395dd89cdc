package locker_test

import (
	"fmt"

	"github.com/orthrus-go/orthrus/engines/mem"
	"github.com/orthrus-go/orthrus/locker"
)

// A transfer between two accounts holds both accounts' locks or neither.
// The parts may come from different engines or switchers; the multi-lock
// acquires them in name order, so a transfer the other way round cannot
// deadlock with this one.
func ExampleNewMultiLock() {
	// Two engines on one in-process store, as two hosts on one server.
	store, _ := mem.NewStore()
	hostA, _ := mem.New(mem.WithStore(store), mem.WithName("host-a"))
	hostB, _ := mem.New(mem.WithStore(store), mem.WithName("host-b"))
	defer hostA.Close()
	defer hostB.Close()

	to, _ := hostA.NewLocker("account/2")
	from, _ := hostA.NewLocker("account/1")
	transfer, err := locker.NewMultiLock(to, from)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("parts in acquisition order:", transfer.Name())

	// Another host holds account/2: all or nothing.
	other, _ := hostB.NewLocker("account/2")
	_ = other.Lock()
	ok, err := transfer.TryLock()
	fmt.Println("TryLock while account/2 is held elsewhere:", ok, err)
	probe, _ := hostB.NewLocker("account/1")
	ok, _ = probe.TryLock()
	fmt.Println("account/1 left free:", ok)
	_ = probe.Unlock()
	_ = other.Unlock()

	if err := transfer.Lock(); err != nil {
		fmt.Println(err)
		return
	}
	for _, p := range transfer.Parts() {
		fmt.Printf("%s fenced with its own token: %v\n", p.Name(), p.Token() > 0)
	}
	fmt.Println("one Unlock releases all:", transfer.Unlock())

	_, err = locker.NewMultiLock(from, from)
	fmt.Println(err)
	// Output:
	// parts in acquisition order: ["account/1" "account/2"]
	// TryLock while account/2 is held elsewhere: false <nil>
	// account/1 left free: true
	// account/1 fenced with its own token: true
	// account/2 fenced with its own token: true
	// one Unlock releases all: <nil>
	// locker: invalid argument: NewMultiLock: parts[0] and parts[1] both lock "account/1"
}
