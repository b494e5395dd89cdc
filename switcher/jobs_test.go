package switcher_test

import (
	"testing"

	"github.com/orthrus-go/orthrus/locker/lockertest"
)

// The election and run-once suites over switchers of two Redis servers.
func TestElectionConformance(t *testing.T) { lockertest.RunElection(t, harness) }

func TestRunOnceConformance(t *testing.T) { lockertest.RunOnce(t, harness) }
