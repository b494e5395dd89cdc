package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/orthrus-go/orthrus/engines/etcd"
	"github.com/orthrus-go/orthrus/locker"
)

func ExampleNew() {
	// The caller owns the client: endpoints, credentials, TLS. endpoint is
	// the etcd started for these examples.
	client, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{endpoint},
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer client.Close() // after the engine

	engine, err := etcd.New(client, etcd.WithPrefix("myapp/locks"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer engine.Close() // releases what is still held; leaves the client open

	l, err := engine.NewLocker("orders/42", locker.WithTTL(10*time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := l.Lock(); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("held on", l.Engine(), "with a token:", l.Token() > 0)
	if err := l.Unlock(); err != nil {
		fmt.Println(err)
	}
	// Output: held on etcd with a token: true
}

func ExampleEngine_NewLocker_tryLock() {
	client, _ := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, Logger: zap.NewNop()})
	defer client.Close()
	engine, _ := etcd.New(client)
	defer engine.Close()

	first, _ := engine.NewLocker("nightly-report")
	second, _ := engine.NewLocker("nightly-report")
	ok, err := first.TryLock()
	fmt.Println("first:", ok, err)
	ok, err = second.TryLock() // contention is not an error
	fmt.Println("second:", ok, err)
	_ = first.Unlock()
	ok, err = second.TryLock()
	fmt.Println("second, after Unlock:", ok, err)
	_ = second.Unlock()
	// Output:
	// first: true <nil>
	// second: false <nil>
	// second, after Unlock: true <nil>
}

func ExampleEngine_NewLocker_fencing() {
	client, _ := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, Logger: zap.NewNop()})
	defer client.Close()
	engine, _ := etcd.New(client)
	defer engine.Close()

	// Each grant of a name gets a higher token (the key's create revision):
	// pass it to the storage you protect, which refuses older tokens.
	l, _ := engine.NewLocker("ledger")
	var tokens []uint64
	for i := 0; i < 2; i++ {
		_ = l.Lock()
		tokens = append(tokens, l.Token())
		_ = l.Unlock()
	}
	fmt.Println("tokens increase:", tokens[1] > tokens[0])
	// Output: tokens increase: true
}

func ExampleEngine_NewLocker_lost() {
	client, _ := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, Logger: zap.NewNop()})
	defer client.Close()
	engine, _ := etcd.New(client)
	defer engine.Close()

	l, _ := engine.NewLocker("migration", locker.WithLease(time.Second))
	_ = l.Lock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	select {
	case <-l.Lost(): // stop working on what the lock protects
		fmt.Println("lease ended")
	case <-ctx.Done():
		fmt.Println("still held")
	}
	fmt.Println("Unlock:", errors.Is(l.Unlock(), locker.ErrLockLost))
	// Output:
	// lease ended
	// Unlock: true
}
