package mem_test

import (
	"testing"

	"github.com/orthrus-go/orthrus/locker/lockertest"
)

// TestModel checks the engine against the lock family's rule, engines
// over one store as processes over one server.
func TestModel(t *testing.T) {
	lockertest.RunModel(t, familyHarness(), lockertest.ModelOps, lockertest.ModelConfig{})
}
