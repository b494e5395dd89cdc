package etcd_test

import (
	"context"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/orthrus-go/orthrus/engines/etcd"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/inspect"
)

func ExampleEngine_NewRWLock() {
	client, _ := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, Logger: zap.NewNop()})
	defer client.Close()
	// Two processes: the rebuilder of a cache and a reader of it.
	rebuilder, _ := etcd.New(client, etcd.WithPrefix("example-rw"))
	defer rebuilder.Close()
	other, _ := etcd.New(client, etcd.WithPrefix("example-rw"))
	defer other.Close()

	cache, _ := rebuilder.NewRWLock("price-cache")
	reader, _ := other.NewRWLock("price-cache")
	_ = cache.WriteLock().Lock()
	ok, _ := reader.ReadLock().TryLock()
	fmt.Println("reader while rebuilding:", ok)

	// Downgrade: keep reading what was just written, let other readers in.
	// A writer that queued meanwhile keeps waiting for the downgraded read.
	_ = cache.ReadLock().Lock()
	_ = cache.WriteLock().Unlock()
	ok, _ = reader.ReadLock().TryLock()
	fmt.Println("reader after the downgrade:", ok)

	// Upgrading would deadlock against another reader doing the same.
	_, err := reader.WriteLock().TryLock()
	fmt.Println("upgrade refused:", errors.Is(err, locker.ErrUpgrade))
	_ = reader.ReadLock().Unlock()
	_ = cache.ReadLock().Unlock()
	// Output:
	// reader while rebuilding: false
	// reader after the downgrade: true
	// upgrade refused: true
}

func ExampleEngine_NewSemaphore() {
	client, _ := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, Logger: zap.NewNop()})
	defer client.Close()
	engine, _ := etcd.New(client, etcd.WithPrefix("example-sem"))
	defer engine.Close()

	// At most 3 exports at once across the fleet; each holder's permits
	// come back if it dies (its TTL), and carry a fencing token.
	exports, _ := engine.NewSemaphore("exports", 3)
	big, _ := exports.Acquire(context.Background(), 2)
	small, _, _ := exports.TryAcquire(1)
	_, another, _ := exports.TryAcquire(1)
	fmt.Println("big:", big != nil, "small:", small != nil, "another:", another)
	_ = big.Unlock()
	_ = small.Unlock()

	// The count is stored in etcd with the semaphore, on no lease: opening
	// it with another count fails, until an operator changes it.
	wrong, _ := engine.NewSemaphore("exports", 5)
	_, _, err := wrong.TryAcquire(1)
	fmt.Println("mismatch:", errors.Is(err, locker.ErrPermitsMismatch))
	in, _ := engine.InspectFamily(context.Background(), inspect.KindPermit, "exports")
	fmt.Println("stored:", in.Permits)
	// Output:
	// big: true small: true another: false
	// mismatch: true
	// stored: 3
}
