package redis_test

import (
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/orthrus-go/orthrus/locker/lockertest"
)

func familyFactory(c goredis.UniversalClient) lockertest.Factory {
	return func(t *testing.T) lockertest.Harness { return harness(t, c) }
}

func TestRWConformanceSingle(t *testing.T) { lockertest.RunRW(t, familyFactory(newSingle(t))) }

func TestRWConformanceCluster(t *testing.T) { lockertest.RunRW(t, familyFactory(newCluster(t))) }

func TestSemaphoreConformanceSingle(t *testing.T) {
	lockertest.RunSemaphore(t, familyFactory(newSingle(t)))
}

func TestSemaphoreConformanceCluster(t *testing.T) {
	lockertest.RunSemaphore(t, familyFactory(newCluster(t)))
}
