package redis_test

import (
	"testing"

	"github.com/orthrus-go/orthrus/engines/redis"
	"github.com/orthrus-go/orthrus/locker/inspect"
	"github.com/orthrus-go/orthrus/locker/lockertest"
)

// TestModel checks the engine against the lock family's rule: two fair
// engines (the rule is first come, first served across processes, which
// a mutex keeps only WithFair), each on a client of its own, as two
// processes. The mutex only: the read-write lock and the semaphore are not
// strictly FIFO here (doc.go: writers do not queue among themselves and
// may pass earlier readers, permit waiters do not queue), which the model
// finds within a few dozen operations; they join when their Lua follows
// internal/lockrule.
func TestModel(t *testing.T) {
	lockertest.RunModel(t, func(t *testing.T) lockertest.Harness {
		return lockertest.Harness{Engine: newEngine(t, newSingle(t), redis.WithPrefix("model"), redis.WithFair())}
	}, lockertest.ModelOps, lockertest.ModelConfig{Kinds: []inspect.Kind{inspect.KindMutex}})
}
