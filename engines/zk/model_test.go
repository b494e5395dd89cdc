package zk_test

import (
	"testing"

	"github.com/orthrus-go/orthrus/engines/zk"
	"github.com/orthrus-go/orthrus/locker/lockertest"
)

// TestModel checks the engine against the lock family's rule: two engines,
// each with a session of its own, as two processes, SetPermits included.
func TestModel(t *testing.T) {
	lockertest.RunModel(t, func(t *testing.T) lockertest.Harness {
		return lockertest.Harness{Engine: newEngine(t, []string{zkAddr}, zk.WithPrefix("/model"))}
	}, lockertest.ModelOps, lockertest.ModelConfig{})
}
