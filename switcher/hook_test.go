package switcher_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/orthrus-go/orthrus/engines/mem"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/switcher"
)

// memPair is a switcher over two in-process engines, a and b, with opts.
func memPair(t *testing.T, opts ...switcher.Option) *switcher.Switcher {
	t.Helper()
	var engines []locker.Engine
	for _, name := range []string{"a", "b"} {
		e, err := mem.New(mem.WithName(name))
		if err != nil {
			t.Fatal(err)
		}
		engines = append(engines, e)
	}
	sw, err := switcher.New(engines, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sw.Close() })
	return sw
}

// The OnSwitch hook runs on the switcher's goroutine, after SwitchEngine
// has returned; WaitEvents waits for it, within its context.
func TestWaitEvents(t *testing.T) {
	release := make(chan struct{})
	var releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(release) }) }
	var mu sync.Mutex
	var got []switcher.Event
	sw := memPair(t, switcher.OnSwitch(func(ev switcher.Event) {
		<-release
		mu.Lock()
		got = append(got, ev)
		mu.Unlock()
	}))
	t.Cleanup(unblock) // before Close, which waits for the hook
	ctx := context.Background()
	if err := sw.WaitEvents(ctx); err != nil {
		t.Fatalf("WaitEvents() with no event = %v; want nil", err)
	}
	for _, to := range []string{"b", "a"} {
		if _, err := sw.SwitchEngineTo(to); err != nil {
			t.Fatal(err)
		}
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := sw.WaitEvents(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitEvents() while the hook is blocked = %v; want context.DeadlineExceeded", err)
	}
	unblock()
	if err := sw.WaitEvents(ctx); err != nil {
		t.Fatalf("WaitEvents() = %v; want nil", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 || got[0].To != "b" || got[1].To != "a" {
		t.Errorf("hook got %+v once WaitEvents returned; want the switches to b then a", got)
	}
	if err := sw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := sw.WaitEvents(ctx); err != nil {
		t.Errorf("WaitEvents() after Close, every event delivered = %v; want nil", err)
	}
}

// EngineState marshals its breaker by name, and reads it back.
func TestEngineStateJSON(t *testing.T) {
	sw := memPair(t)
	b, err := json.Marshal(sw.States())
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"Name":"a","Current":true,"Desired":false,"Breaker":"closed","Healthy":false},` +
		`{"Name":"b","Current":false,"Desired":false,"Breaker":"closed","Healthy":false}]`
	if got := strings.ReplaceAll(string(b), `"Healthy":true`, `"Healthy":false`); got != want {
		t.Errorf("json.Marshal(States()) = %s; want %s", b, want)
	}
	for _, st := range []gobreaker.State{gobreaker.StateClosed, gobreaker.StateHalfOpen, gobreaker.StateOpen} {
		in := switcher.EngineState{Name: "x", Breaker: st}
		b, err := json.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		var out switcher.EngineState
		if err := json.Unmarshal(b, &out); err != nil || out != in {
			t.Errorf("json.Unmarshal(%s) = %+v, %v; want %+v", b, out, err, in)
		}
	}
	var out switcher.EngineState
	if err := json.Unmarshal([]byte(`{"Breaker":"ajar"}`), &out); err == nil {
		t.Errorf(`json.Unmarshal({"Breaker":"ajar"}) = nil error; want one naming the state`)
	}
}
