package redis_test

import (
	"testing"

	"github.com/orthrus-go/orthrus/locker/lockertest"
)

func TestLockDelay(t *testing.T) {
	c := newSingle(t)
	t.Run("Plain", func(t *testing.T) {
		lockertest.RunLockDelay(t, func(t *testing.T) lockertest.Harness { return harness(t, c) })
	})
	t.Run("Fair", func(t *testing.T) {
		lockertest.RunLockDelay(t, func(t *testing.T) lockertest.Harness { return fairHarness(t, c, "delay-fair") })
	})
}
