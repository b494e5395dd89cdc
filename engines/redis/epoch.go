package redis

import (
	"context"
	"errors"
	"strconv"

	goredis "github.com/redis/go-redis/v9"
)

// epochKey holds a switcher's epoch record: "<prefix>:epoch:<fleet>",
// which no lock key ("<prefix>:{name}...") can be.
func (e *Engine) epochKey(fleet string) string { return e.prefix + ":epoch:" + fleet }

// RecordedEpoch implements switcher.EpochRecord.
func (e *Engine) RecordedEpoch(ctx context.Context, fleet string) (uint64, error) {
	v, err := e.client.Get(ctx, e.epochKey(fleet)).Uint64()
	if errors.Is(err, goredis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, e.fail(ctx, "epoch", fleet, err)
	}
	return v, nil
}

var swapScript = newScript("epoch_swap")

// CompareAndSwapEpoch implements switcher.EpochRecord.
func (e *Engine) CompareAndSwapEpoch(ctx context.Context, fleet string, old, epoch uint64) (bool, error) {
	n, err := swapScript.run(ctx, e.client, []string{e.epochKey(fleet)},
		strconv.FormatUint(old, 10), strconv.FormatUint(epoch, 10)).Int()
	if err != nil {
		return false, e.fail(ctx, "epoch", fleet, err)
	}
	return n == 1, nil
}
