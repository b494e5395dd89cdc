package redis_test

import (
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/orthrus-go/orthrus/engines/redis"
	"github.com/orthrus-go/orthrus/internal/testserver"
	"github.com/orthrus-go/orthrus/locker/lockertest"
)

// A frozen server leaves renewals unanswered: the hold is reported at risk
// before it is lost, with a client that honours deadlines and with one
// that does not (its reads time out after 3s, past the TTL).
func TestAtRiskBeforeLost(t *testing.T) {
	for _, timeouts := range []bool{true, false} {
		t.Run(map[bool]string{true: "ContextTimeoutEnabled", false: "ClientTimeouts"}[timeouts], func(t *testing.T) {
			s := testserver.Redis(t)
			c := goredis.NewClient(&goredis.Options{Addr: s.Addr(), MaxRetries: -1, ContextTimeoutEnabled: timeouts})
			defer c.Close()
			causes := &lockertest.Causes{}
			e, err := redis.New(c, redis.WithObserver(causes))
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			lockertest.AtRiskBeforeLost(t, e, causes, 1500*time.Millisecond, s.Pause, s.Resume)
		})
	}
}
