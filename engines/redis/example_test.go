package redis_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/orthrus-go/orthrus/engines/redis"
	"github.com/orthrus-go/orthrus/locker"
)

func ExampleNew() {
	client := goredis.NewClient(&goredis.Options{Addr: redisAddr})
	defer client.Close()
	engine, err := redis.New(client, redis.WithName("redis-main"), redis.WithPrefix("myapp/locks"))
	if err != nil {
		log.Fatal(err)
	}
	defer engine.Close()

	l, err := engine.NewLocker("orders/42")
	if err != nil {
		log.Fatal(err)
	}
	if err := l.Lock(); err != nil {
		log.Fatal(err)
	}
	fmt.Println("held on", l.Engine())
	if err := l.Unlock(); err != nil {
		log.Fatal(err)
	}
	// Output: held on redis-main
}

// Pass the fencing token to the resource you protect; it must refuse a
// token lower than the highest it has seen.
func ExampleEngine_NewLocker_fencing() {
	client := goredis.NewClient(&goredis.Options{Addr: redisAddr})
	defer client.Close()
	engine, _ := redis.New(client)
	defer engine.Close()

	var last uint64
	for i := 0; i < 3; i++ {
		l, _ := engine.NewLocker("invoice-run")
		if err := l.Lock(); err != nil {
			log.Fatal(err)
		}
		token := l.Token()
		fmt.Println("token increased:", token > last)
		last = token
		_ = l.Unlock()
	}
	// Output:
	// token increased: true
	// token increased: true
	// token increased: true
}

func ExampleEngine_NewLocker_tryLockTimeout() {
	client := goredis.NewClient(&goredis.Options{Addr: redisAddr})
	defer client.Close()
	engine, _ := redis.New(client)
	defer engine.Close()

	holder, _ := engine.NewLocker("nightly-report")
	other, _ := engine.NewLocker("nightly-report")
	_ = holder.Lock()
	ok, err := other.TryLockTimeout(100 * time.Millisecond)
	fmt.Println("second owner got it:", ok, err)
	_ = holder.Unlock()
	ok, err = other.TryLock()
	fmt.Println("after release:", ok, err)
	_ = other.Unlock()
	// Output:
	// second owner got it: false <nil>
	// after release: true <nil>
}

// A critical section that must not outlive the lock watches Lost.
func ExampleEngine_NewLocker_lost() {
	client := goredis.NewClient(&goredis.Options{Addr: redisAddr})
	defer client.Close()
	engine, _ := redis.New(client)
	defer engine.Close()

	l, _ := engine.NewLocker("short-job", locker.WithLease(200*time.Millisecond))
	_ = l.Lock()
	select {
	case <-l.Lost():
		fmt.Println("lease ran out before the work finished")
	case <-time.After(5 * time.Second):
		fmt.Println("work done")
	}
	err := l.Unlock()
	fmt.Println(errors.Is(err, locker.ErrLockLost))
	// Output:
	// lease ran out before the work finished
	// true
}

func ExampleEngine_NewLocker_lockCtx() {
	client := goredis.NewClient(&goredis.Options{Addr: redisAddr})
	defer client.Close()
	engine, _ := redis.New(client)
	defer engine.Close()

	holder, _ := engine.NewLocker("migrations")
	_ = holder.Lock()
	defer holder.Unlock()

	waiter, _ := engine.NewLocker("migrations")
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err := waiter.LockCtx(ctx)
	fmt.Println(err == context.DeadlineExceeded)
	// Output: true
}

func ExampleEngine_Ping() {
	client := goredis.NewClient(&goredis.Options{Addr: redisAddr})
	defer client.Close()
	engine, _ := redis.New(client)
	defer engine.Close()
	fmt.Println(engine.Ping(context.Background()))
	// Output: <nil>
}

// Readers share the lock, a writer has it alone; a writer may downgrade
// to a read without letting another writer in between.
func ExampleEngine_NewRWLock() {
	client := goredis.NewClient(&goredis.Options{Addr: redisAddr})
	defer client.Close()
	engine, _ := redis.New(client)
	defer engine.Close()

	catalog, _ := engine.NewRWLock("catalog")
	other, _ := engine.NewRWLock("catalog")

	_ = catalog.ReadLock().Lock()
	ok, _ := other.ReadLock().TryLock()
	fmt.Println("second reader:", ok)
	ok, _ = other.WriteLock().TryLock()
	fmt.Println("writer while read:", ok)
	_ = other.ReadLock().Unlock()
	_ = catalog.ReadLock().Unlock()

	// Rebuild under the write lock, then keep reading what was written.
	_ = catalog.WriteLock().Lock()
	_ = catalog.ReadLock().Lock() // a downgrade: granted at once
	_ = catalog.WriteLock().Unlock()
	ok, _ = other.WriteLock().TryLock()
	fmt.Println("writer after the downgrade:", ok)
	ok, _ = other.ReadLock().TryLock()
	fmt.Println("reader after the downgrade:", ok)
	_ = other.ReadLock().Unlock()
	_ = catalog.ReadLock().Unlock()
	// Output:
	// second reader: true
	// writer while read: false
	// writer after the downgrade: false
	// reader after the downgrade: true
}

// A semaphore bounds how many workers of a fleet call a rate-limited API
// at once; each permit is a lease that ends with its holder.
func ExampleEngine_NewSemaphore() {
	client := goredis.NewClient(&goredis.Options{Addr: redisAddr})
	defer client.Close()
	engine, _ := redis.New(client)
	defer engine.Close()

	api, err := engine.NewSemaphore("partner-api", 2)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	first, _ := api.Acquire(ctx, 1)
	second, _ := api.Acquire(ctx, 1)
	_, ok, err := api.TryAcquire(1)
	fmt.Println("third permit:", ok, err)
	_ = first.Unlock()
	third, ok, _ := api.TryAcquire(1)
	fmt.Println("after a release:", ok)
	_ = second.Unlock()
	_ = third.Unlock()

	// The count is stored with the semaphore: opening it with another
	// count is refused at the first acquisition.
	wrong, _ := engine.NewSemaphore("partner-api", 5)
	_, _, err = wrong.TryAcquire(1)
	fmt.Println(errors.Is(err, locker.ErrPermitsMismatch))
	// Output:
	// third permit: false <nil>
	// after a release: true
	// true
}
