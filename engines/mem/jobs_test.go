package mem_test

import (
	"context"
	"testing"

	"github.com/orthrus-go/orthrus/engines/mem"
	"github.com/orthrus-go/orthrus/locker/lockertest"
)

// jobsHarness is familyHarness with an Expire hook (ForceUnlock), for the
// loss of a leadership.
func jobsHarness() lockertest.Factory {
	processes := familyHarness()
	return func(t *testing.T) lockertest.Harness {
		h := processes(t)
		e := h.Engine.(*mem.Engine)
		h.Expire = func(ctx context.Context, name string) error {
			_, err := e.ForceUnlock(ctx, name)
			return err
		}
		return h
	}
}

func TestElectionConformance(t *testing.T) { lockertest.RunElection(t, jobsHarness()) }

func TestRunOnceConformance(t *testing.T) { lockertest.RunOnce(t, jobsHarness()) }
