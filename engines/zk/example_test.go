package zk_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/orthrus-go/orthrus/engines/zk"
	"github.com/orthrus-go/orthrus/locker"
)

// zkAddr is the address of the ZooKeeper server TestMain starts.

func ExampleNew() {
	e, err := zk.New([]string{zkAddr},
		zk.WithPrefix("/examples"),
		zk.WithSessionTimeout(5*time.Second), // how long a dead process keeps its holds
	)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer e.Close()

	l, err := e.NewLocker("orders/42")
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := l.Lock(); err != nil {
		fmt.Println(err)
		return
	}
	// Pass l.Token() to the guarded resource as a fencing token, and
	// stop when l.Lost() closes.
	fmt.Println("held on", l.Engine(), "with a token:", l.Token() > 0)
	if err := l.Unlock(); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("released")
	// Output:
	// held on zk with a token: true
	// released
}

func ExampleNew_unreachable() {
	start := time.Now()
	_, err := zk.New([]string{"127.0.0.1:1"}, zk.WithConnectTimeout(200*time.Millisecond))
	fmt.Println(errors.Is(err, locker.ErrUnavailable), time.Since(start) < 5*time.Second)
	// Output: true true
}

func ExampleWithAuth() {
	// Nodes get CREATOR_ALL: only sessions with these credentials can read
	// or delete them.
	e, err := zk.New([]string{zkAddr}, zk.WithAuth("digest", "billing:s3cret"), zk.WithPrefix("/examples-acl"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer e.Close()
	l, _ := e.NewLocker("invoice-run")
	ok, err := l.TryLock()
	fmt.Println(ok, err)
	if ok {
		_ = l.Unlock()
	}
	// Output: true <nil>
}

func ExampleEngine_NewLocker_lease() {
	e, err := zk.New([]string{zkAddr}, zk.WithPrefix("/examples"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer e.Close()
	// A fixed lease: the engine deletes the node when it runs out.
	l, _ := e.NewLocker("nightly-report", locker.WithLease(200*time.Millisecond))
	if err := l.Lock(); err != nil {
		fmt.Println(err)
		return
	}
	<-l.Lost()
	fmt.Println(errors.Is(l.Unlock(), locker.ErrLockLost))
	// Output: true
}
