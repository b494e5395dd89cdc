package switcher_test

import (
	"testing"

	"github.com/orthrus-go/orthrus/locker/inspect"
	"github.com/orthrus-go/orthrus/locker/lockertest"
)

// TestModel checks the switcher against the lock family's rule: two
// switchers, as two processes, over two mem engines whose stores they
// share (mem follows the rule, as internal/lockrule states it). The
// switcher does not inspect mutexes: its primary, where its acquisitions
// go while it is healthy, does.
func TestModel(t *testing.T) {
	st := memStores(t)
	lockertest.RunModel(t, func(t *testing.T) lockertest.Harness {
		sw := memSwitcher(t, st)
		return lockertest.Harness{Engine: lockertest.Inspected(sw, sw.Engines()[0].(inspect.Inspector))}
	}, lockertest.ModelOps, lockertest.ModelConfig{})
}
