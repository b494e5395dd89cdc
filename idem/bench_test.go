package idem_test

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/orthrus-go/orthrus/idem"
)

// floorExtend is the check-and-extend of the bare SET NX PX recipe.
var floorExtend = goredis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end return 0`)

// BenchmarkBeginDone compares one Begin + Done(success) on Redis, each on
// a new operation, with the bare recipe it is built on: SET NX PX, then a
// Lua check-and-extend. Both are two round trips.
func BenchmarkBeginDone(b *testing.B) {
	ctx := context.Background()
	c := goredis.NewClient(&goredis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer c.Close()
	s, err := idem.NewRedisStore(c, idem.WithPrefix("bench:gate"))
	if err != nil {
		b.Fatal(err)
	}
	g, err := idem.New("bench", s, idem.WithRetention(time.Minute))
	if err != nil {
		b.Fatal(err)
	}
	// Every cycle is a new operation: b.N restarts from 0 on every round.
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	var nf, ng int
	floor := func() {
		nf++
		key := "bench:floor:" + run + ":" + strconv.Itoa(nf)
		if ok, err := c.SetNX(ctx, key, "token", 30*time.Second).Result(); !ok || err != nil {
			b.Fatalf("SET NX = %v, %v", ok, err)
		}
		if n, err := floorExtend.Run(ctx, c, []string{key}, "token", time.Minute.Milliseconds()).Int(); n != 1 || err != nil {
			b.Fatalf("extend = %v, %v", n, err)
		}
	}
	gate := func() {
		ng++
		tk, dup, err := g.Begin(ctx, "order:"+run+":"+strconv.Itoa(ng))
		if tk == nil || err != nil {
			b.Fatalf("Begin = %v, %v, %v", tk, dup, err)
		}
		if err := tk.Done(ctx, nil); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("floor", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			floor()
		}
	})
	b.Run("gate", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			gate()
		}
	})
	// The two alternate cycle by cycle, so that a busy machine slows both
	// alike: floor/gate is the gate's throughput relative to the floor.
	b.Run("interleaved", func(b *testing.B) {
		floors, gates := make([]time.Duration, 0, b.N), make([]time.Duration, 0, b.N)
		for i := 0; i < b.N; i++ {
			t0 := time.Now()
			floor()
			t1 := time.Now()
			gate()
			floors, gates = append(floors, t1.Sub(t0)), append(gates, time.Since(t1))
		}
		b.ReportMetric(sum(floors).Seconds()/sum(gates).Seconds(), "floor/gate")
		b.ReportMetric(float64(median(floors).Microseconds()), "floor-p50-µs")
		b.ReportMetric(float64(median(gates).Microseconds()), "gate-p50-µs")
	})
}

func sum(ds []time.Duration) (total time.Duration) {
	for _, d := range ds {
		total += d
	}
	return total
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// BenchmarkIdentify is the hashing of a struct's content, the gate's only
// CPU work of note.
func BenchmarkIdentify(b *testing.B) {
	content := payment{Order: "A-17", Amount: 1200}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := idem.Identify("bench", content); err != nil {
			b.Fatal(err)
		}
	}
}
