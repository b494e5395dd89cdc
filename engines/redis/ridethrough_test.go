package redis_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/orthrus-go/orthrus/engines/mem"
	"github.com/orthrus-go/orthrus/engines/redis"
	"github.com/orthrus-go/orthrus/internal/testserver"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/switcher"
)

var _ switcher.Cluster = (*redis.Engine)(nil)

// The ride-through window is Sentinel's: a failover client gets the
// default, a single node and Cluster none, and the option sets it.
func TestRideThroughWindow(t *testing.T) {
	failover := goredis.NewFailoverClient(&goredis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{"127.0.0.1:1"}})
	defer failover.Close()
	for _, tc := range []struct {
		name   string
		client goredis.UniversalClient
		opts   []redis.Option
		want   time.Duration
	}{
		{"single node", newSingle(t), nil, 0},
		{"cluster", newCluster(t), nil, 0},
		{"failover client", failover, nil, redis.DefaultSentinelRideThrough},
		{"set", newSingle(t), []redis.Option{redis.WithRideThrough(time.Second)}, time.Second},
		{"set to none", failover, []redis.Option{redis.WithRideThrough(0)}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEngine(t, tc.client, tc.opts...)
			defer e.Close()
			if got := e.RideThrough(); got != tc.want {
				t.Errorf("RideThrough() = %v; want %v", got, tc.want)
			}
		})
	}
	if _, err := redis.New(newSingle(t), redis.WithRideThrough(-time.Second)); !errors.Is(err, locker.ErrInvalidArgument) {
		t.Errorf("New(WithRideThrough(-1s)) = %v; want ErrInvalidArgument", err)
	}
}

// A switcher over a Sentinel-managed Redis and a secondary: SIGKILL of the
// master is ridden through, with no switch, while Sentinel promotes the
// replica, and acquisitions resume within a second of the promotion.
func TestSentinelRideThrough(t *testing.T) {
	s := testserver.RedisSentinel(t, 1, 3)
	// As config.Open builds it: one failure surfaces at once.
	c := goredis.NewFailoverClient(&goredis.FailoverOptions{
		MasterName: testserver.SentinelMaster, SentinelAddrs: s.SentinelAddrs(),
		DialTimeout: 300 * time.Millisecond, DialerRetries: 1, MaxRetries: -1, ContextTimeoutEnabled: true,
	})
	defer c.Close()
	// The test's Sentinels: down-after-milliseconds 1000, and 5s for the
	// rest, as WithRideThrough advises.
	primary := newEngine(t, c, redis.WithName("redis"), redis.WithPrefix("ride"), redis.WithLogger(quietLog),
		redis.WithRideThrough(6*time.Second))
	secondary, err := mem.New(mem.WithName("mem"))
	if err != nil {
		t.Fatal(err)
	}
	var switches atomic.Int32
	sw, err := switcher.New([]locker.Engine{primary, secondary}, switcher.WithLogger(quietLog),
		switcher.OnSwitch(func(switcher.Event) { switches.Add(1) }))
	if err != nil {
		t.Fatal(err)
	}
	defer sw.Close()

	g := cycleAll(t, sw, 4)
	time.Sleep(500 * time.Millisecond) // grants before the fault
	killed := time.Now()
	if err := s.Master.Kill(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.WaitFailover(s.Master.Addr(), 30*time.Second); err != nil {
		t.Fatal(err)
	}
	failover := time.Since(killed)
	time.Sleep(time.Second + 500*time.Millisecond) // grants after it
	grants, errs := g.stop()

	gap := longestGap(grants)
	t.Logf("failover %v; %d grants; longest wait between grants %v", failover, len(grants), gap)
	if n := switches.Load(); n != 0 || sw.Current() != "redis" {
		t.Errorf("%d switches, current %q; want none, redis", n, sw.Current())
	}
	if gap > failover+time.Second {
		t.Errorf("longest wait between grants %v; want within the failover (%v) + 1s", gap, failover)
	}
	for _, err := range errs {
		t.Errorf("LockCtx() = %v; want every acquisition granted", err)
	}
}

// cycler is owners locking and unlocking names of their own until stopped,
// recording when each grant came.
type cycler struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	grants []time.Time
	errs   []error
}

func cycleAll(t *testing.T, e locker.Engine, owners int) *cycler {
	ctx, cancel := context.WithCancel(context.Background())
	g := &cycler{cancel: cancel}
	for i := range owners {
		l, err := e.NewLocker(fmt.Sprintf("owner/%d", i))
		if err != nil {
			t.Fatal(err)
		}
		g.wg.Go(func() { g.cycle(ctx, l) })
	}
	return g
}

func (g *cycler) cycle(ctx context.Context, l locker.Locker) {
	for ctx.Err() == nil {
		lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := l.LockCtx(lctx)
		cancel()
		g.mu.Lock()
		switch {
		case err == nil:
			g.grants = append(g.grants, time.Now())
		case ctx.Err() == nil:
			g.errs = append(g.errs, err)
		}
		g.mu.Unlock()
		if err != nil {
			continue
		}
		time.Sleep(5 * time.Millisecond)
		// A release that got no answer goes on in the background.
		if err := l.Unlock(); err != nil && !errors.Is(err, locker.ErrUnavailable) {
			g.mu.Lock()
			g.errs = append(g.errs, err)
			g.mu.Unlock()
		}
	}
}

// stop stops the owners and returns the grants, in order, and the errors.
func (g *cycler) stop() ([]time.Time, []error) {
	g.cancel()
	g.wg.Wait()
	slices.SortFunc(g.grants, func(a, b time.Time) int { return a.Compare(b) })
	return g.grants, g.errs
}

// longestGap is the longest time between two grants in a row.
func longestGap(grants []time.Time) time.Duration {
	var gap time.Duration
	for i := 1; i < len(grants); i++ {
		gap = max(gap, grants[i].Sub(grants[i-1]))
	}
	return gap
}
