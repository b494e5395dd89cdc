package zk_test

import (
	"testing"

	"github.com/orthrus-go/orthrus/locker/lockertest"
)

func TestLockDelay(t *testing.T) {
	c := admin(t)
	lockertest.RunLockDelay(t, func(t *testing.T) lockertest.Harness { return harness(t, c) })
}
