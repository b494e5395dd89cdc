package zk_test

import (
	"testing"

	"github.com/orthrus-go/orthrus/engines/zk"
	"github.com/orthrus-go/orthrus/locker/lockertest"
)

// TestModel checks the engine against the lock family's rule: two engines,
// each with a session of its own, as two processes. The semaphores' count
// stays fixed: after SetPermits, a waiter asking more permits than the new
// count fails with ErrPermitsMismatch (the rule has it wait), a first
// acquisition already waiting fails too when the count changes under it
// (the count is checked at each look, not once), and InspectFamily lists
// holds granted under a higher count as waiters.
func TestModel(t *testing.T) {
	lockertest.RunModel(t, func(t *testing.T) lockertest.Harness {
		return lockertest.Harness{Engine: newEngine(t, []string{zkAddr}, zk.WithPrefix("/model"))}
	}, lockertest.ModelOps, lockertest.ModelConfig{FixedCount: true})
}
