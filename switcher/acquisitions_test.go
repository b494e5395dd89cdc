package switcher_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/engines/mem"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/inspect"
	"github.com/orthrus-go/orthrus/locker/observe"
	"github.com/orthrus-go/orthrus/switcher"
)

// acquireCounter is a observe.Observer that counts each owner's
// acquisitions on the engine, as the engine's Core reports them.
type acquireCounter struct {
	mu    sync.Mutex
	count map[string]int // by owner ID
}

func (c *acquireCounter) AcquireStart(ctx context.Context, a observe.Acquisition) context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.count[a.Owner]++
	return ctx
}

func (c *acquireCounter) of(owner string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.count[owner]
}

func (*acquireCounter) AcquireEnd(context.Context, observe.Acquisition, observe.AcquireResult) {}
func (*acquireCounter) ReleaseStart(ctx context.Context, _ observe.HoldInfo) context.Context {
	return ctx
}
func (*acquireCounter) ReleaseEnd(context.Context, observe.HoldInfo, error)        {}
func (*acquireCounter) Renewed(observe.HoldInfo, error)                            {}
func (*acquireCounter) HoldEnd(observe.HoldInfo, time.Duration, observe.LostCause) {}

// TestContendedLockCtxAcquiresOnce: a LockCtx that finds the name held
// waits on the engine with one acquisition, as it would on the bare
// engine, not a try followed by a wait.
func TestContendedLockCtxAcquiresOnce(t *testing.T) {
	obs := &acquireCounter{count: map[string]int{}}
	e, err := mem.New(mem.WithName("primary"), mem.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	spare, err := mem.New(mem.WithName("secondary"))
	if err != nil {
		t.Fatal(err)
	}
	sw, err := switcher.New([]locker.Engine{e, spare})
	if err != nil {
		t.Fatal(err)
	}
	defer sw.Close()
	name := t.Name()
	holder, err := sw.NewLocker(name)
	if err != nil {
		t.Fatal(err)
	}
	const owner = "waiter"
	waiter, err := sw.NewLocker(name, locker.WithOwner(owner))
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Lock(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- waiter.LockCtx(ctx) }()
	var in inspect.Inspection
	if !within(func() bool {
		in, err = e.Inspect(context.Background(), name)
		return err != nil || len(in.Waiters) == 1
	}) || err != nil {
		t.Fatalf("Inspect(%q) = %+v, %v; want 1 waiter within 1s", name, in, err)
	}
	if err := holder.Unlock(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("LockCtx() = %v; want nil", err)
	}
	if got := obs.of(owner); got != 1 {
		t.Errorf("engine acquisitions of a contended LockCtx = %d; want 1", got)
	}
	if err := waiter.Unlock(); err != nil {
		t.Error(err)
	}
}
