package etcd_test

import (
	"testing"

	"github.com/orthrus-go/orthrus/engines/etcd"
	"github.com/orthrus-go/orthrus/locker/lockertest"
)

// TestModel checks the engine against the lock family's rule, every kind
// and SetPermits included: two engines, each on a client of its own, as
// two processes.
func TestModel(t *testing.T) {
	lockertest.RunModel(t, func(t *testing.T) lockertest.Harness {
		return lockertest.Harness{Engine: newEngine(t, newClient(t, endpoint), etcd.WithPrefix("model"))}
	}, lockertest.ModelOps, lockertest.ModelConfig{})
}
