package switcher_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/engines/mem"
	"github.com/orthrus-go/orthrus/engines/redis"
	"github.com/orthrus-go/orthrus/locker"
)

// A hold may go to any engine, so the switcher's minimum TTL is the
// largest of its engines', and it refuses a shorter TTL when the Locker is
// made, not at an acquisition that happens to go to that engine.
func TestMinTTLIsTheEnginesLargest(t *testing.T) {
	sw, _ := memRedisSwitcher(t)
	if got := sw.MinTTL(); got != redis.MinTTL || got <= mem.MinTTL {
		t.Fatalf("MinTTL() = %v; want %v, redis's (mem's is %v)", got, redis.MinTTL, mem.MinTTL)
	}
	below := redis.MinTTL - time.Millisecond
	for _, opt := range []locker.Option{locker.WithTTL(below), locker.WithLease(below)} {
		_, err := sw.NewLocker("x", opt)
		if !errors.Is(err, locker.ErrInvalidArgument) || !strings.Contains(err.Error(), below.String()) || !strings.Contains(err.Error(), `"sw"`) {
			t.Errorf("NewLocker() with %v on mem (current) and redis = %v; want ErrInvalidArgument naming the option and the switcher", below, err)
		}
	}
	l, err := sw.NewLocker("x", locker.WithTTL(redis.MinTTL))
	if err != nil {
		t.Fatalf("NewLocker(WithTTL(redis.MinTTL)) = %v", err)
	}
	if err := l.Lock(); err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(); err != nil {
		t.Error(err)
	}
}
