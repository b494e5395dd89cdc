package zk_test

import (
	"testing"

	"github.com/orthrus-go/orthrus/locker/lockertest"
)

func TestMultiConformance(t *testing.T) {
	c := admin(t)
	lockertest.RunMulti(t, func(t *testing.T) lockertest.Harness { return harness(t, c) })
}
