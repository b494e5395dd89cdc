package zk_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/engines/zk"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/inspect"
)

// BenchmarkFamilyCycle: one owner takes and releases one name, uncontended:
// the mutex, the read side, the write side, and one permit of a
// semaphore, in one run so that their ratios compare like with like.
func BenchmarkFamilyCycle(b *testing.B) {
	e := newEngine(b, []string{zkAddr}, zk.WithPrefix("/bench"))
	defer e.Close()
	// The server is a new JVM: warm it (and the engine) up with every
	// kind for a while, or the first sub-benchmark pays for its JIT.
	warmUp(b, e, 5*time.Second)
	b.Run("mutex", func(b *testing.B) {
		l, _ := e.NewLocker("cycle")
		lockUnlock(b, l)
	})
	b.Run("read", func(b *testing.B) {
		l, _ := e.NewRWLock("cycle")
		lockUnlock(b, l.ReadLock())
	})
	b.Run("write", func(b *testing.B) {
		l, _ := e.NewRWLock("cycle")
		lockUnlock(b, l.WriteLock())
	})
	b.Run("permit", func(b *testing.B) {
		s, _ := e.NewSemaphore("cycle", 1)
		ctx := context.Background()
		for b.Loop() {
			p, err := s.Acquire(ctx, 1)
			if err != nil {
				b.Fatal(err)
			}
			if err := p.Unlock(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// warmUp cycles a mutex, both sides of a read-write lock and a permit
// for d.
func warmUp(b *testing.B, e *zk.Engine, d time.Duration) {
	m, _ := e.NewLocker("warm")
	rw, _ := e.NewRWLock("warm")
	s, _ := e.NewSemaphore("warm", 1)
	p, _ := s.NewPermit(1)
	for end := time.Now().Add(d); time.Now().Before(end); {
		for _, l := range []locker.Locker{m, rw.ReadLock(), rw.WriteLock(), p} {
			if err := l.Lock(); err != nil {
				b.Fatal(err)
			}
			if err := l.Unlock(); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkFamilyHandoff: a holder in one process releases to a waiter
// parked in another; handoff-ms is the median time from the holder's
// Unlock to the waiter's Lock returning: a mutex to a mutex, a writer to
// a reader, a permit to a waiter for it.
func BenchmarkFamilyHandoff(b *testing.B) {
	a := newEngine(b, []string{zkAddr}, zk.WithPrefix("/bench"))
	defer a.Close()
	w := newEngine(b, []string{zkAddr}, zk.WithPrefix("/bench"))
	defer w.Close()
	warmUp(b, a, 5*time.Second)
	b.Run("mutex", func(b *testing.B) {
		h, _ := a.NewLocker("handoff")
		p, _ := w.NewLocker("handoff")
		parkedHandoff(b, h, p, func() int {
			in, _ := a.Inspect(context.Background(), "handoff")
			return len(in.Waiters)
		})
	})
	b.Run("write-read", func(b *testing.B) {
		h, _ := a.NewRWLock("handoff")
		p, _ := w.NewRWLock("handoff")
		parkedHandoff(b, h.WriteLock(), p.ReadLock(), waiters(a, inspect.KindRead, "handoff"))
	})
	b.Run("permit", func(b *testing.B) {
		h, _ := a.NewSemaphore("handoff", 1)
		p, _ := w.NewSemaphore("handoff", 1)
		hp, _ := h.NewPermit(1)
		pp, _ := p.NewPermit(1)
		parkedHandoff(b, hp, pp, waiters(a, inspect.KindPermit, "handoff"))
	})
}

func waiters(e *zk.Engine, k inspect.Kind, name string) func() int {
	return func() int {
		in, _ := e.InspectFamily(context.Background(), k, name)
		return len(in.Waiters)
	}
}

// parkedHandoff takes holder, parks waiter behind it (until parked says
// it waits), and times holder's Unlock to waiter's Lock returning, b.N
// times.
func parkedHandoff(b *testing.B, holder, waiter locker.Locker, parked func() int) {
	samples := make([]time.Duration, 0, b.N)
	for b.Loop() {
		if err := holder.Lock(); err != nil {
			b.Fatal(err)
		}
		done := make(chan time.Time, 1)
		errc := make(chan error, 1)
		go func() {
			if err := waiter.Lock(); err != nil {
				errc <- err
				return
			}
			done <- time.Now()
		}()
		for parked() == 0 {
			time.Sleep(time.Millisecond) // outside the measured span
		}
		released := time.Now()
		if err := holder.Unlock(); err != nil {
			b.Fatal(err)
		}
		select {
		case at := <-done:
			samples = append(samples, at.Sub(released))
		case err := <-errc:
			b.Fatal(err)
		}
		if err := waiter.Unlock(); err != nil {
			b.Fatal(err)
		}
	}
	slices.Sort(samples)
	b.ReportMetric(float64(samples[len(samples)/2])/float64(time.Millisecond), "handoff-ms")
}
