package etcd_test

import (
	"testing"

	"github.com/orthrus-go/orthrus/engines/etcd"
	"github.com/orthrus-go/orthrus/locker/lockertest"
)

// TestModel checks the engine against the lock family's rule: two engines,
// each on a client of its own, as two processes. The semaphores' count
// stays fixed: a waiter that asked for more permits than were free under
// a lower count is not woken when SetPermits raises the count so that it
// fits (it waits for the hold before it to go); the model finds it within
// a few hundred operations.
func TestModel(t *testing.T) {
	lockertest.RunModel(t, func(t *testing.T) lockertest.Harness {
		return lockertest.Harness{Engine: newEngine(t, newClient(t, endpoint), etcd.WithPrefix("model"))}
	}, lockertest.ModelOps, lockertest.ModelConfig{FixedCount: true})
}
