package redlock_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	redsyncgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	goredis "github.com/redis/go-redis/v9"

	"github.com/orthrus-go/orthrus/engines/redis"
	"github.com/orthrus-go/orthrus/engines/redlock"
	"github.com/orthrus-go/orthrus/internal/benchround"
	"github.com/orthrus-go/orthrus/locker"
)

// mutex is what the benchmark drives of each implementation.
type mutex struct {
	lock, unlock func() error
}

// implementations are compared in an order that scripts/bench rotates from
// round to round (ORTHRUS_BENCH_ROUND), so that none always runs first.
func implementations() []string {
	names := []string{"orthrus", "redis", "redsync"}
	return benchround.Rotate(names)
}

// implementation builds the named one over the shared servers, each over
// clients of its own: "orthrus" this engine over the five, "redis" the
// single-node engine over the first, "redsync" go-redsync's Redlock with a
// pool per node over the five.
func implementation(b *testing.B, name, key string) mutex {
	switch name {
	case "orthrus":
		e := newEngine(b, clients(b, addrsOf(shared)), redlock.WithPrefix("bench"))
		b.Cleanup(func() { _ = e.Close() })
		return handleMutex(b, e, key)
	case "redis":
		e, err := redis.New(clients(b, addrsOf(shared[:1]))[0], redis.WithPrefix("bench"))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = e.Close() })
		return handleMutex(b, e, key)
	case "redsync":
		var pools []redsyncredis.Pool
		for _, c := range clients(b, addrsOf(shared)) {
			pools = append(pools, redsyncgoredis.NewPool(c.(*goredis.Client)))
		}
		m := redsync.New(pools...).NewMutex("bench:redsync:"+key, redsync.WithTries(1<<30))
		return mutex{lock: m.Lock, unlock: func() error { _, err := m.Unlock(); return err }}
	}
	b.Fatalf("unknown implementation %q", name)
	return mutex{}
}

func handleMutex(b *testing.B, e locker.Engine, key string) mutex {
	l, err := e.NewLocker(key)
	if err != nil {
		b.Fatal(err)
	}
	return mutex{lock: l.Lock, unlock: l.Unlock}
}

// BenchmarkLockUnlock is one owner locking and unlocking one name,
// uncontended.
func BenchmarkLockUnlock(b *testing.B) {
	for _, im := range implementations() {
		b.Run(im, func(b *testing.B) {
			m := implementation(b, im, fmt.Sprintf("%s/%d", b.Name(), time.Now().UnixNano()))
			cycle(b, m) // connections warm
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				cycle(b, m)
			}
		})
	}
}

func cycle(b *testing.B, m mutex) {
	if err := m.lock(); err != nil {
		b.Fatalf("Lock() = %v", err)
	}
	if err := m.unlock(); err != nil {
		b.Fatalf("Unlock() = %v", err)
	}
}
