package zk_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/engines/zk"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/inspect"
)

// An ensemble that stops answering fails the calls within the connect
// timeout, as ErrUnavailable.
func TestInspectUnreachable(t *testing.T) {
	p := newProxy(t, zkAddr)
	const timeout = 500 * time.Millisecond
	e := newEngine(t, []string{p.l.Addr().String()}, zk.WithConnectTimeout(timeout))
	defer e.Close()
	p.silent.Store(true)
	p.drop()
	ctx := context.Background()
	start := time.Now()
	if _, err := e.Inspect(ctx, "x"); !errors.Is(err, locker.ErrUnavailable) {
		t.Errorf("Inspect() = %v; want ErrUnavailable", err)
	}
	if _, err := e.ForceUnlock(ctx, "x"); !errors.Is(err, locker.ErrUnavailable) {
		t.Errorf("ForceUnlock() = %v; want ErrUnavailable", err)
	}
	if _, err := e.InspectFamily(ctx, inspect.KindRead, "x"); !errors.Is(err, locker.ErrUnavailable) {
		t.Errorf("InspectFamily() = %v; want ErrUnavailable", err)
	}
	if _, err := e.ForceUnlockFamily(ctx, inspect.KindPermit, "x", 0); !errors.Is(err, locker.ErrUnavailable) {
		t.Errorf("ForceUnlockFamily() = %v; want ErrUnavailable", err)
	}
	if d := time.Since(start); d > 4*timeout+time.Second {
		t.Errorf("failing took %v; want about four connect timeouts (%v)", d, 4*timeout)
	}
}
