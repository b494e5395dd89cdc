package lockertest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/inspect"
)

// Isolation checks the isolation of applications that share servers with
// credentials of their own. owner is one application's engine; intruder is
// another application's credentials pointed at owner's namespace (its
// prefix). While owner holds a name, the intruder can neither take it,
// wait for it, read it nor force-unlock it: each call fails with an error
// wrapping locker.ErrPermission, never locker.ErrUnavailable (a refusal is
// no outage for a breaker to count), and owner's hold is intact after.
// Read and force-unlock are checked when the engines are Inspectors.
func Isolation(t *testing.T, owner, intruder locker.Engine) {
	t.Helper()
	name := lockName(t, "isolated")
	held := newLocker(t, owner, name)
	mustLock(t, held)
	defer mustUnlock(t, held)
	want := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, locker.ErrPermission) || errors.Is(err, locker.ErrUnavailable) {
			t.Errorf("intruder %s = %v; want ErrPermission, not ErrUnavailable", what, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l := newLocker(t, intruder, name)
	ok, err := l.TryLock()
	want("TryLock()", err)
	if ok {
		t.Errorf("intruder TryLock() took the lock")
	}
	want("LockCtx()", l.LockCtx(ctx))
	if in, ok := intruder.(inspect.Inspector); ok {
		_, err := in.Inspect(ctx, name)
		want("Inspect()", err)
		_, err = in.ForceUnlock(ctx, name)
		want("ForceUnlock()", err)
	}
	if in, ok := owner.(inspect.Inspector); ok {
		got, err := in.Inspect(ctx, name)
		if err != nil || got.Holder == nil || got.Holder.Token != held.Token() {
			t.Errorf("owner Inspect() = %+v, %v; want its hold intact, token %d", got, err, held.Token())
		}
	}
	select {
	case <-held.Lost():
		t.Errorf("the owner's Lost() closed")
	default:
	}
}
