package redis_test

import (
	"testing"

	"github.com/orthrus-go/orthrus/locker/lockertest"
)

func TestElectionConformance(t *testing.T) { lockertest.RunElection(t, process) }

func TestRunOnceConformance(t *testing.T) { lockertest.RunOnce(t, process) }

// process is one process of a fleet on the single server: an engine on a
// client of its own.
func process(t *testing.T) lockertest.Harness { return harness(t, newSingle(t)) }
