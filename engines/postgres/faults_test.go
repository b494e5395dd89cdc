package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/engines/postgres"
	"github.com/orthrus-go/orthrus/internal/testserver"
	"github.com/orthrus-go/orthrus/locker/driver"
	"github.com/orthrus-go/orthrus/locker/lockertest"
)

// The fault suite: a server of its own per case, frozen or killed.
func TestFaults(t *testing.T) {
	lockertest.RunFaults(t, func(t *testing.T) lockertest.FaultHarness {
		s := testserver.Postgres(t)
		p := newPool(t, s.DSN())
		const timeout = time.Second
		e, err := postgres.New(p, postgres.WithRequestTimeout(timeout))
		if err != nil {
			t.Fatalf("New() = %v", err)
		}
		return lockertest.FaultHarness{
			Harness: lockertest.Harness{
				Engine: e,
				Residue: func(ctx context.Context, name string) (int, error) {
					ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
					defer cancel()
					n, err := rowCount(ctx, p, postgres.DefaultSchema, name)
					return max(n-1, 0), err
				},
			},
			Pause:          s.Pause,
			Resume:         s.Resume,
			Kill:           s.Kill,
			RequestTimeout: timeout,
		}
	})
}

// TryLock on a frozen server, at the engine's defaults, returns
// ErrUnavailable within driver.DefaultRequestTimeout.
func TestTryLockFrozenWithinRequestTimeout(t *testing.T) {
	s := testserver.Postgres(t)
	e := newEngine(t, newPool(t, s.DSN()))
	lockertest.TryLockFrozen(t, e, s.Pause, s.Resume, driver.DefaultRequestTimeout)
}

// A frozen server: the hold is reported at risk before it is lost.
func TestAtRiskBeforeLost(t *testing.T) {
	s := testserver.Postgres(t)
	causes := &lockertest.Causes{}
	e := newEngine(t, newPool(t, s.DSN()), postgres.WithRequestTimeout(300*time.Millisecond), postgres.WithObserver(causes))
	lockertest.AtRiskBeforeLost(t, e, causes, 2*time.Second, s.Pause, s.Resume)
}
