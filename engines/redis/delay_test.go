package redis_test

import (
	"testing"

	"github.com/orthrus-go/orthrus/locker/lockertest"
)

func TestLockDelay(t *testing.T) {
	c := newSingle(t)
	lockertest.RunLockDelay(t, func(t *testing.T) lockertest.Harness { return harness(t, c) })
}
