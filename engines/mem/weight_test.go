package mem_test

import (
	"context"
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/engines/mem"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/inspect"
	"github.com/orthrus-go/orthrus/locker/lockertest"
)

// queue starts l's LockCtx, waits until the engine shows n waiters of
// kind on name, and returns the result channel.
func queue(t *testing.T, e *mem.Engine, kind inspect.Kind, name string, l locker.Locker, n int) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- l.LockCtx(t.Context()) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		in, err := e.InspectFamily(context.Background(), kind, name)
		if err == nil && len(in.Waiters) == n {
			return done
		}
		if time.Now().After(deadline) {
			t.Fatalf("InspectFamily(%v, %q) = %+v, %v; want %d waiters", kind, name, in, err, n)
		}
		time.Sleep(time.Millisecond) // a poll of the engine's state, not a wait for an event
	}
}

// must returns a function that fails t on an error and returns the value.
func must[T any](t *testing.T) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

// TestWeightedRW: behind a writer, a heavier writer that came after a
// reader is granted before it, with a higher token, and the reader's
// token, granted last, is higher still.
func TestWeightedRW(t *testing.T) {
	e := must[*mem.Engine](t)(mem.New())
	defer e.Close()
	rw := must[locker.RWLock](t)
	holder, reader, writer := rw(e.NewRWLock("w")), rw(e.NewRWLock("w")), rw(e.NewRWLock("w", locker.WithWeight(5)))
	noErr(t, holder.WriteLock().Lock())
	readDone := queue(t, e, inspect.KindRead, "w", reader.ReadLock(), 1)
	writeDone := queue(t, e, inspect.KindWrite, "w", writer.WriteLock(), 2)
	held := holder.WriteLock().Token()
	noErr(t, holder.WriteLock().Unlock())
	lockertest.WantGranted(t, writeDone, "the weight-5 writer")
	lockertest.WantPending(t, readDone, "the weight-1 reader while the writer holds")
	if w := writer.WriteLock().Token(); w <= held {
		t.Errorf("the heavier writer's token %d; want above the first writer's %d", w, held)
	}
	w := writer.WriteLock().Token()
	noErr(t, writer.WriteLock().Unlock())
	lockertest.WantGranted(t, readDone, "the reader last")
	if r := reader.ReadLock().Token(); r <= w {
		t.Errorf("the reader's token %d, granted after the writer; want above the writer's %d", r, w)
	}
	noErr(t, reader.ReadLock().Unlock())
}

// TestWeightedSemaphore: a heavier request for 2 permits is granted
// before a lighter, older request for 1 when both fit in turn.
func TestWeightedSemaphore(t *testing.T) {
	e := must[*mem.Engine](t)(mem.New())
	defer e.Close()
	sem := must[locker.Semaphore](t)
	permit := must[locker.Handle](t)
	holder := permit(sem(e.NewSemaphore("s", 2)).NewPermit(2))
	light := permit(sem(e.NewSemaphore("s", 2)).NewPermit(1))
	heavy := permit(sem(e.NewSemaphore("s", 2, locker.WithWeight(3))).NewPermit(2))
	noErr(t, holder.Lock())
	lightDone := queue(t, e, inspect.KindPermit, "s", light, 1)
	heavyDone := queue(t, e, inspect.KindPermit, "s", heavy, 2)
	noErr(t, holder.Unlock())
	lockertest.WantGranted(t, heavyDone, "the weight-3 request for 2")
	lockertest.WantPending(t, lightDone, "the weight-1 request while 2 of 2 are held")
	noErr(t, heavy.Unlock())
	lockertest.WantGranted(t, lightDone, "the weight-1 request last")
	noErr(t, light.Unlock())
}

func noErr(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
