package etcd_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/engines/etcd"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/inspect"
)

// The lock family against the mutex, interleaved in one run:
//
//	go test -run '^$' -bench 'Family' -benchtime 1s -count 7 ./engines/etcd | benchstat -col /kind -

// BenchmarkFamilyCycle is one owner taking and releasing, uncontended: the
// mutex, the read side, the write side, and one permit of a semaphore
// (Acquire, then Unlock).
func BenchmarkFamilyCycle(b *testing.B) {
	for _, kind := range []string{"mutex", "read", "write", "permit"} {
		b.Run("kind="+kind, func(b *testing.B) {
			e := newEngine(b, newClient(b, endpoint))
			name := benchName(b)
			var cycle func() error
			switch kind {
			case "mutex", "read", "write":
				l := familySide(b, e, kind, name)
				cycle = func() error {
					if err := l.Lock(); err != nil {
						return err
					}
					return l.Unlock()
				}
			case "permit":
				s, err := e.NewSemaphore(name, 1)
				if err != nil {
					b.Fatal(err)
				}
				ctx := context.Background()
				cycle = func() error {
					p, err := s.Acquire(ctx, 1)
					if err != nil {
						return err
					}
					return p.Unlock()
				}
			}
			if err := cycle(); err != nil { // lease granted, connection warm
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := cycle(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// familySide returns a new owner's lock of kind mutex, read or write.
func familySide(b *testing.B, e *etcd.Engine, kind, name string) locker.Handle {
	if kind == "mutex" {
		return newLocker(b, e, name)
	}
	l, err := e.NewRWLock(name)
	if err != nil {
		b.Fatal(err)
	}
	if kind == "read" {
		return l.ReadLock()
	}
	return l.WriteLock()
}

// BenchmarkFamilyHandoff measures, b.N times, the time from a holder's
// Unlock to the Lock of a waiter parked behind it returning (handoff-ms,
// the median): mutex to mutex, writer to reader, permit to permit (a
// semaphore of one). Holder and waiter are engines of their own, as two
// processes.
func BenchmarkFamilyHandoff(b *testing.B) {
	for _, kind := range []string{"mutex", "read", "permit"} {
		b.Run("kind="+kind, func(b *testing.B) {
			holdE, waitE := newEngine(b, newClient(b, endpoint)), newEngine(b, newClient(b, endpoint))
			name := benchName(b)
			var hold, wait func() (locker.Handle, error)
			var waiting func() (int, error)
			ctx := context.Background()
			switch kind {
			case "mutex", "read":
				side := "write"
				if kind == "mutex" {
					side = "mutex"
				}
				h, w := familySide(b, holdE, side, name), familySide(b, waitE, kind, name)
				hold = func() (locker.Handle, error) { return h, h.Lock() }
				wait = func() (locker.Handle, error) { return w, w.Lock() }
				waiting = func() (int, error) {
					if kind == "mutex" {
						in, err := holdE.Inspect(ctx, name)
						return len(in.Waiters), err
					}
					in, err := holdE.InspectFamily(ctx, inspect.KindRead, name)
					return len(in.Waiters), err
				}
			case "permit":
				hs, err := holdE.NewSemaphore(name, 1)
				if err != nil {
					b.Fatal(err)
				}
				ws, err := waitE.NewSemaphore(name, 1)
				if err != nil {
					b.Fatal(err)
				}
				hold = func() (locker.Handle, error) { return hs.Acquire(ctx, 1) }
				wait = func() (locker.Handle, error) { return ws.Acquire(ctx, 1) }
				waiting = func() (int, error) {
					in, err := holdE.InspectFamily(ctx, inspect.KindPermit, name)
					return len(in.Waiters), err
				}
			}
			samples := make([]time.Duration, 0, b.N)
			for i := 0; i < b.N; i++ {
				h, err := hold()
				if err != nil {
					b.Fatal(err)
				}
				type result struct {
					l   locker.Handle
					err error
				}
				done := make(chan result, 1)
				go func() {
					l, err := wait()
					done <- result{l, err}
				}()
				// Parked: the waiter's key is queued (the engine exposes no
				// event for it).
				for n := 0; n == 0; {
					if n, err = waiting(); err != nil {
						b.Fatal(err)
					}
					if n == 0 {
						time.Sleep(time.Millisecond)
					}
				}
				start := time.Now()
				if err := h.Unlock(); err != nil {
					b.Fatal(err)
				}
				r := <-done
				samples = append(samples, time.Since(start))
				if r.err != nil {
					b.Fatal(r.err)
				}
				if err := r.l.Unlock(); err != nil {
					b.Fatal(err)
				}
			}
			slices.Sort(samples)
			b.ReportMetric(float64(samples[len(samples)/2])/float64(time.Millisecond), "handoff-ms")
		})
	}
}
