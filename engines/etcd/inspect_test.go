package etcd_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/engines/etcd"
	"github.com/orthrus-go/orthrus/internal/testserver"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/inspect"
)

// An unreachable cluster fails each operator's call within the request
// timeout, as ErrUnavailable.
func TestInspectUnreachable(t *testing.T) {
	s := testserver.Etcd(t)
	addr := s.Addr()
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	const timeout = 300 * time.Millisecond
	e := newEngine(t, newClient(t, addr), etcd.WithRequestTimeout(timeout))
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
		t.Errorf("failing took %v; want about four request timeouts (%v)", d, 4*timeout)
	}
}
