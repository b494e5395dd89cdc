package redis_test

import (
	"testing"

	"github.com/orthrus-go/orthrus/engines/redis"
	"github.com/orthrus-go/orthrus/locker/lockertest"
)

// TestModel checks the engine against the lock family's rule: two fair
// engines (the rule is first come, first served across processes, which
// a mutex keeps only WithFair), each on a client of its own, as two
// processes; the mutex, the read-write lock and the semaphore, whose Lua
// states the rule (lua/family.lua).
func TestModel(t *testing.T) {
	lockertest.RunModel(t, func(t *testing.T) lockertest.Harness {
		return lockertest.Harness{Engine: newEngine(t, newSingle(t), redis.WithPrefix("model"), redis.WithFair())}
	}, lockertest.ModelOps, lockertest.ModelConfig{})
}
