package etcd_test

import (
	"testing"

	"github.com/orthrus-go/orthrus/locker/lockertest"
)

func TestRWConformance(t *testing.T) { lockertest.RunRW(t, harness) }

func TestSemaphoreConformance(t *testing.T) { lockertest.RunSemaphore(t, harness) }
