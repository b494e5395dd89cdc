// Command basic takes a Redis lock, does a little work under it and
// releases it, showing the fencing token of the hold.
//
//	go run ./examples/basic -addr 127.0.0.1:6379
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/orthrus-go/orthrus/engines/redis"
	"github.com/orthrus-go/orthrus/locker"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:6379", "Redis address, host:port")
	name := flag.String("name", "examples/basic", "lock name")
	flag.Parse()
	if err := run(*addr, *name); err != nil {
		log.Fatal(err)
	}
}

func run(addr, name string) error {
	client := goredis.NewClient(&goredis.Options{Addr: addr})
	defer client.Close()
	engine, err := redis.New(client)
	if err != nil {
		return err
	}
	defer engine.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := engine.Ping(ctx); err != nil {
		return fmt.Errorf("no Redis at -addr %s (start redis-server or pass -addr): %w", addr, err)
	}
	l, err := engine.NewLocker(name)
	if err != nil {
		return err
	}
	if err := l.LockCtx(ctx); err != nil {
		return err
	}
	fmt.Printf("holding %q on %s with fencing token %d\n", l.Name(), l.Engine(), l.Token())

	// The work: stop early if the hold is lost under us.
	select {
	case <-time.After(500 * time.Millisecond):
		fmt.Println("work done")
	case <-l.Lost():
		fmt.Fprintln(os.Stderr, "lock lost: abandoning the work")
	}
	if err := l.Unlock(); err != nil && !errors.Is(err, locker.ErrLockLost) {
		return err
	}
	fmt.Println("released")
	return nil
}
