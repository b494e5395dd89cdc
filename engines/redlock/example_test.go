package redlock_test

import (
	"fmt"

	goredis "github.com/redis/go-redis/v9"

	"github.com/orthrus-go/orthrus/engines/redlock"
)

// A lock over five independent masters: granted by a majority, with a
// fencing token that the next grant exceeds.
func Example() {
	var nodes []goredis.UniversalClient
	for _, s := range shared { // five redis-servers the tests started
		c := goredis.NewClient(&goredis.Options{Addr: s.Addr()})
		defer c.Close()
		nodes = append(nodes, c)
	}
	e, err := redlock.New(nodes)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer e.Close()

	l, _ := e.NewLocker("example/orders-42")
	if err := l.Lock(); err != nil {
		fmt.Println(err)
		return
	}
	first := l.Token()
	fmt.Println("held; majority is", e.Quorum(), "of", len(nodes))
	_ = l.Unlock()

	other, _ := e.NewLocker("example/orders-42")
	if ok, err := other.TryLock(); ok && err == nil {
		fmt.Println("next token is higher:", other.Token() > first)
		_ = other.Unlock()
	}
	// Output:
	// held; majority is 3 of 5
	// next token is higher: true
}
