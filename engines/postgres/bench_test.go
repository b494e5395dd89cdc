package postgres_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/engines/postgres"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/lockertest"
)

// go test -run '^$' -bench . -count 10 | benchstat

func benchEngine(b *testing.B) *postgres.Engine {
	return newEngine(b, newPool(b, dsn), postgres.WithSchema("bench"))
}

func lockUnlock(b *testing.B, l locker.Locker) {
	if err := l.Lock(); err != nil {
		b.Fatal(err)
	}
	if err := l.Unlock(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkLockUnlock is one owner locking and unlocking, uncontended.
func BenchmarkLockUnlock(b *testing.B) {
	l := newLocker(b, benchEngine(b), fmt.Sprintf("%s/%d", b.Name(), time.Now().UnixNano()))
	lockUnlock(b, l) // tables made, connection warm
	b.ResetTimer()
	for range b.N {
		lockUnlock(b, l)
	}
}

// BenchmarkLockUnlockParallel is owners of names of their own, in
// parallel, on one engine: the engine's throughput.
func BenchmarkLockUnlockParallel(b *testing.B) {
	e := benchEngine(b)
	lockUnlock(b, newLocker(b, e, "warm"))
	base := fmt.Sprintf("%s/%d", b.Name(), time.Now().UnixNano())
	var n atomic.Int64
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		l, err := e.NewLocker(fmt.Sprintf("%s/%d", base, n.Add(1)))
		if err != nil {
			b.Error(err)
			return
		}
		for pb.Next() {
			if err := l.Lock(); err != nil {
				b.Error(err)
				return
			}
			if err := l.Unlock(); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkHandoff is four owners on two engines taking turns on one name:
// handoff-ms is the median time from a release to the next owner's grant,
// a NOTIFY and a re-read.
func BenchmarkHandoff(b *testing.B) {
	a, c := benchEngine(b), benchEngine(b)
	name := fmt.Sprintf("%s/%d", b.Name(), time.Now().UnixNano())
	owners := make([]lockertest.Mutex, 4)
	for i := range owners {
		e := a
		if i%2 == 1 {
			e = c
		}
		owners[i] = newLocker(b, e, name)
	}
	lockUnlock(b, owners[0].(locker.Locker))
	lockertest.Handoff(b, owners)
}
