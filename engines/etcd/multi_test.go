package etcd_test

import (
	"testing"

	"github.com/orthrus-go/orthrus/locker/lockertest"
)

func TestMultiConformance(t *testing.T) {
	lockertest.RunMulti(t, harness)
}
