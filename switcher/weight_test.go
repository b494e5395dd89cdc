package switcher_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/engines/mem"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/switcher"
)

// TestWeightsPassThrough: the switcher passes WithWeight to the engine
// current at each acquisition, which decides: mem ranks the waiters, redis
// refuses the weight at once, and the refusal is no engine failure (the
// next acquisition without a weight is served by redis).
func TestWeightsPassThrough(t *testing.T) {
	sw, m := memRedisSwitcher(t)
	newLocker := func(opts ...locker.Option) locker.Handle {
		t.Helper()
		l, err := sw.NewLocker("weights", opts...)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	holder := newLocker()
	noErr(t, holder.Lock())
	// Each waiter reports its grant and lets go, so the order is the
	// engine's grant order.
	order := make(chan string, 2)
	for i, w := range []struct {
		who  string
		opts []locker.Option
	}{{"light", nil}, {"heavy", []locker.Option{locker.WithWeight(5)}}} {
		l := newLocker(w.opts...)
		done := lockAwaitWaiters(t, m, l, i+1)
		go func() {
			if <-done == nil {
				order <- w.who
				_ = l.Unlock()
			}
		}()
	}
	noErr(t, holder.Unlock())
	var got []string
	for timeout := time.After(20 * time.Second); len(got) < 2; {
		select {
		case who := <-order:
			got = append(got, who)
		case <-timeout:
			t.Fatalf("granted %v, then nothing within 20s", got)
		}
	}
	if want := []string{"heavy", "light"}; !slices.Equal(got, want) {
		t.Fatalf("grant order %v; want %v (weight 5 before weight 1)", got, want)
	}

	if _, err := sw.SwitchEngineTo("redis"); err != nil {
		t.Fatal(err)
	}
	if err := newLocker(locker.WithWeight(3)).Lock(); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("Lock() with WithWeight(3) on redis = %v; want ErrUnsupported", err)
	}
	plain := newLocker()
	if ok, err := plain.TryLock(); !ok || err != nil || plain.Engine() != "redis" {
		t.Fatalf("TryLock() after the refusal = %v, %v on %q; want true, nil on redis", ok, err, plain.Engine())
	}
	noErr(t, plain.Unlock())
}

// lockAwaitWaiters starts l's LockCtx and waits until mem shows n waiters
// of the name.
func lockAwaitWaiters(t *testing.T, m *mem.Engine, l locker.Locker, n int) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- l.LockCtx(t.Context()) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		in, err := m.Inspect(context.Background(), "weights")
		if err == nil && len(in.Waiters) == n {
			return done
		}
		if time.Now().After(deadline) {
			t.Fatalf("Inspect() = %+v, %v; want %d waiters", in, err, n)
		}
		time.Sleep(time.Millisecond) // a poll of the engine's state, as lockertest's
	}
}

// memRedisSwitcher returns a switcher named sw over an engine named mem,
// current, and a redis engine named redis; the test closes it.
func memRedisSwitcher(t *testing.T) (*switcher.Switcher, *mem.Engine) {
	t.Helper()
	m, err := mem.New(mem.WithName("mem"))
	if err != nil {
		t.Fatal(err)
	}
	r, _ := redisEngine(t, "redis", primaryAddr)
	sw, err := switcher.New([]locker.Engine{m, r}, switcher.WithName("sw"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sw.Close() })
	return sw, m
}

func noErr(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
