package runonce

import (
	"context"
	"fmt"

	"github.com/orthrus-go/orthrus/locker"
)

// ErrNotLocked is returned by AssertHeld outside a run. It wraps
// locker.ErrNotHeld.
var ErrNotLocked = fmt.Errorf("runonce: not running under a lock: %w", locker.ErrNotHeld)

type holdKey struct{}

// heldBy is what a run's context carries; zero for HeldForTest.
type heldBy struct {
	name  string
	lost  <-chan struct{} // the hold's Lost
	ended <-chan struct{} // closed when the run's fn has returned
}

func withHold(ctx context.Context, l locker.Lease, ended <-chan struct{}) context.Context {
	return context.WithValue(ctx, holdKey{}, heldBy{name: l.Name(), lost: l.Lost(), ended: ended})
}

// AssertHeld reports whether ctx is (derived from) the context of a run
// whose hold is still live, for code that must only run under the job's
// lock: nil then, ErrNotLocked outside a run, and an error wrapping
// locker.ErrLockLost when the run's hold was lost. Unit tests of such code
// pass it a context made by HeldForTest.
func AssertHeld(ctx context.Context) error {
	h, ok := ctx.Value(holdKey{}).(heldBy)
	switch {
	case !ok:
		return ErrNotLocked
	case h.lost == nil: // HeldForTest
		return nil
	}
	select {
	case <-h.lost:
		return fmt.Errorf("runonce: hold of %q: %w", h.name, locker.ErrLockLost)
	case <-h.ended:
		return fmt.Errorf("runonce: run of %q has ended: %w", h.name, ErrNotLocked)
	default:
		return nil
	}
}

// HeldForTest returns a context derived from ctx that AssertHeld accepts
// without a lock, for unit tests of code that asserts it runs under one.
func HeldForTest(ctx context.Context) context.Context {
	return context.WithValue(ctx, holdKey{}, heldBy{})
}
