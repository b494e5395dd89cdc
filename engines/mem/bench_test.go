package mem_test

import (
	"testing"

	"github.com/orthrus-go/orthrus/engines/mem"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/lockertest"
)

func benchEngine(b *testing.B) *mem.Engine {
	b.Helper()
	e, err := mem.New()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = e.Close() })
	return e
}

// BenchmarkLockUnlock is the hot path: one owner's uncontended Lock and
// Unlock.
func BenchmarkLockUnlock(b *testing.B) {
	l, err := benchEngine(b).NewLocker("bench")
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if err := l.Lock(); err != nil {
			b.Fatal(err)
		}
		if err := l.Unlock(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHandoff: four owners of one name taking turns, each grant a
// hand-off from the queue.
func BenchmarkHandoff(b *testing.B) { benchHandoff(b, 1, 1, 1, 1) }

// BenchmarkHandoffWeighted is BenchmarkHandoff with owners of weights 1,
// 3, 2 and 10: each grant goes to the heaviest waiter, not the oldest.
func BenchmarkHandoffWeighted(b *testing.B) { benchHandoff(b, 1, 3, 2, 10) }

func benchHandoff(b *testing.B, weights ...int) {
	e := benchEngine(b)
	owners := make([]lockertest.Mutex, len(weights))
	for i, w := range weights {
		l, err := e.NewLocker("bench", locker.WithWeight(w))
		if err != nil {
			b.Fatal(err)
		}
		owners[i] = l
	}
	lockertest.Handoff(b, owners)
}

// BenchmarkReadLock: a reader's Lock and Unlock while another reads.
func BenchmarkReadLock(b *testing.B) {
	e := benchEngine(b)
	rws := make([]locker.RWLock, 2)
	for i := range rws {
		rw, err := e.NewRWLock("bench")
		if err != nil {
			b.Fatal(err)
		}
		rws[i] = rw
	}
	if err := rws[0].ReadLock().Lock(); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if err := rws[1].ReadLock().Lock(); err != nil {
			b.Fatal(err)
		}
		if err := rws[1].ReadLock().Unlock(); err != nil {
			b.Fatal(err)
		}
	}
	if err := rws[0].ReadLock().Unlock(); err != nil {
		b.Fatal(err)
	}
}
