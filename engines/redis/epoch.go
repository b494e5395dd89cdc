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

// swapScript sets KEYS[1] to ARGV[2] if it holds ARGV[1] ("0": absent).
var swapScript = goredis.NewScript(`
if (redis.call('GET', KEYS[1]) or '0') ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[2])
return 1`)

// CompareAndSwapEpoch implements switcher.EpochRecord.
func (e *Engine) CompareAndSwapEpoch(ctx context.Context, fleet string, old, epoch uint64) (bool, error) {
	n, err := swapScript.Run(ctx, e.client, []string{e.epochKey(fleet)},
		strconv.FormatUint(old, 10), strconv.FormatUint(epoch, 10)).Int()
	if err != nil {
		return false, e.fail(ctx, "epoch", fleet, err)
	}
	return n == 1, nil
}
