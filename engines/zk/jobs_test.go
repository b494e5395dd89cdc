package zk_test

import (
	"testing"

	"github.com/orthrus-go/orthrus/locker/lockertest"
)

func TestElectionConformance(t *testing.T) { lockertest.RunElection(t, process) }

func TestRunOnceConformance(t *testing.T) { lockertest.RunOnce(t, process) }

// process is one process of a fleet: an engine with a session of its own,
// and the connection its Expire hook uses.
func process(t *testing.T) lockertest.Harness { return harness(t, admin(t)) }
