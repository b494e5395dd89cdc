package switcher_test

import (
	"testing"

	"github.com/orthrus-go/orthrus/locker/lockertest"
)

// The switcher passes the delay to the engine it grants on.
func TestLockDelay(t *testing.T) { lockertest.RunLockDelay(t, harness) }
