package etcd_test

import (
	"testing"

	"github.com/orthrus-go/orthrus/locker/lockertest"
)

func TestLockDelay(t *testing.T) {
	lockertest.RunLockDelay(t, harness)
}
