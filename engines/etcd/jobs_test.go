package etcd_test

import (
	"testing"

	"github.com/orthrus-go/orthrus/locker/lockertest"
)

func TestElectionConformance(t *testing.T) { lockertest.RunElection(t, harness) }

func TestRunOnceConformance(t *testing.T) { lockertest.RunOnce(t, harness) }
