package postgres_test

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"cirello.io/pglock"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx", for pglock

	"github.com/orthrus-go/orthrus/engines/postgres"
	"github.com/orthrus-go/orthrus/internal/benchround"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/lockertest"
)

// Benchmarks against cirello.io/pglock over database/sql on the same
// server: go test -run '^$' -bench . -count 10 | benchstat. scripts/bench
// runs them interleaved with the other engines' and prints the ratios.

func benchEngine(b *testing.B) *postgres.Engine {
	return newEngine(b, newPool(b, dsn), postgres.WithSchema("bench"))
}

func benchName(b *testing.B) string { return fmt.Sprintf("%s/%d", b.Name(), time.Now().UnixNano()) }

func lockUnlock(b *testing.B, l lockertest.Mutex) {
	if err := l.Lock(); err != nil {
		b.Fatal(err)
	}
	if err := l.Unlock(); err != nil {
		b.Fatal(err)
	}
}

// contender is one implementation under comparison: owners of one name,
// each over a client (a pool, a *sql.DB) of its own, as separate
// processes would be, and parked, which returns once owner i waits for
// the name behind its holder.
type contender struct {
	owners []lockertest.Mutex
	parked func(b *testing.B, i int)
}

// implementations lists the implementations, orthrus first, rotated by
// the round of scripts/bench (ORTHRUS_BENCH_ROUND) so that none always
// runs first.
func implementations() []string {
	names := []string{"orthrus", "pglock"}
	return benchround.Rotate(names)
}

func implementation(b *testing.B, impl string, owners int) contender {
	if impl == "pglock" {
		return pglockContender(b, owners)
	}
	return orthrusContender(b, slices.Repeat([]int{1}, owners)...)
}

// orthrusContender's owners, of weights, are on engines of their own; a
// waiter is parked once its row is in the table next to the holder's.
func orthrusContender(b *testing.B, weights ...int) contender {
	name := benchName(b)
	p := newPool(b, dsn)
	c := contender{owners: []lockertest.Mutex{newLocker(b, newEngine(b, p, postgres.WithSchema("bench")), name, locker.WithWeight(weights[0]))}}
	for _, w := range weights[1:] {
		c.owners = append(c.owners, newLocker(b, benchEngine(b), name, locker.WithWeight(w)))
	}
	c.parked = func(b *testing.B, _ int) {
		for {
			n, err := rowCount(context.Background(), p, "bench", name)
			if err != nil {
				b.Fatal(err)
			}
			if n == 2 {
				return
			}
			// The rows are the server's, which sends no event for them.
			time.Sleep(time.Millisecond)
		}
	}
	return c
}

// pglockOwner is a pglock client as a lockertest.Mutex. pglock's
// defaults stay: a 20s lease, a 5s heartbeat, and a waiter that retries
// once a lease duration (it polls; nothing wakes it).
type pglockOwner struct {
	c    *pglock.Client
	name string
	l    *pglock.Lock
	// settle makes Lock wait out the heartbeat that Acquire starts at
	// once: a Release during it cancels its UPDATE, which may still
	// commit, then deletes by the old version and fails with
	// ErrLockAlreadyReleased, leaving the row until it expires. A
	// hand-off releases milliseconds after the grant, in that window.
	settle bool
}

func (o *pglockOwner) Lock() (err error) {
	if o.l, err = o.c.Acquire(o.name); err != nil || !o.settle {
		return err
	}
	// The heartbeat gives the lock a new record version once it commits;
	// then it sleeps for 5s, and a Release cancels it harmlessly. pglock
	// tells of neither: this polls.
	for acquired := o.l.RecordVersionNumber(); o.l.RecordVersionNumber() == acquired; {
		if o.l.IsReleased() {
			return fmt.Errorf("pglock: the first heartbeat of %q failed", o.name)
		}
		time.Sleep(100 * time.Microsecond)
	}
	return nil
}

func (o *pglockOwner) Unlock() error { return o.c.Release(o.l) }

// waitLog tells, through waiting, that its client has found the lock
// taken and sleeps until its next try: pglock logs that, and only that, as
// "not acquired, wait".
type waitLog struct{ waiting chan struct{} }

func (w waitLog) Debug(msg string, _ ...any) {
	if strings.HasPrefix(msg, "not acquired, wait") {
		select {
		case w.waiting <- struct{}{}:
		default: // already told, not yet heard
		}
	}
}

func (waitLog) Error(string, ...any) {}

func pglockContender(b *testing.B, owners int) contender {
	name := benchName(b)
	var c contender
	logs := make([]waitLog, owners)
	for i := range owners {
		db, err := sql.Open("pgx", dsn)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = db.Close() })
		logs[i] = waitLog{make(chan struct{}, 1)}
		// New accepts lib/pq only; UnsafeNew is pglock's way to another
		// driver, pgx's here, the driver the engine runs on.
		cl, err := pglock.UnsafeNew(db, pglock.WithCustomTable("pglock_bench"), pglock.WithLevelLogger(logs[i]))
		if err != nil {
			b.Fatal(err)
		}
		if err := cl.TryCreateTable(); err != nil {
			b.Fatal(err)
		}
		c.owners = append(c.owners, &pglockOwner{c: cl, name: name, settle: owners > 1})
	}
	c.parked = func(_ *testing.B, i int) { <-logs[i].waiting }
	return c
}

// BenchmarkLockUnlock is one owner locking and unlocking, uncontended:
// orthrus with fencing, pglock without.
func BenchmarkLockUnlock(b *testing.B) {
	for _, impl := range implementations() {
		b.Run(impl, func(b *testing.B) {
			l := implementation(b, impl, 1).owners[0]
			lockUnlock(b, l) // tables made, connection warm
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				lockUnlock(b, l)
			}
		})
	}
}

// BenchmarkLockUnlockParallel is owners of names of their own, in
// parallel, on one engine: the engine's throughput.
func BenchmarkLockUnlockParallel(b *testing.B) {
	e := benchEngine(b)
	lockUnlock(b, newLocker(b, e, "warm"))
	base := fmt.Sprintf("%s/%d", b.Name(), time.Now().UnixNano())
	var n atomic.Int64
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		l, err := e.NewLocker(fmt.Sprintf("%s/%d", base, n.Add(1)))
		if err != nil {
			b.Error(err)
			return
		}
		for pb.Next() {
			if err := l.Lock(); err != nil {
				b.Error(err)
				return
			}
			if err := l.Unlock(); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkHandoff is two owners passing one name to each other b.N
// times, each turn a hand-off to a parked waiter: the next owner calls
// Lock while the holder holds, and the holder releases once it waits.
// handoff-ms is the median time from the Unlock call to the waiter's Lock
// returning: a NOTIFY and a re-read for orthrus, the rest of its sleep for
// pglock. The first turn is already a hand-off, so that a pglock run of
// b.N = 1 (some seconds) has its figure.
func BenchmarkHandoff(b *testing.B) {
	for _, impl := range implementations() {
		b.Run(impl, func(b *testing.B) {
			handoffs(b, implementation(b, impl, 2))
		})
	}
}

// BenchmarkHandoffWeighted is BenchmarkHandoff's orthrus with owners of
// weight 1 and with owners of weights 10 and 3, one after the other in
// each run: every hand-off of the second goes to a waiter heavier than 1,
// whose arrival recorded its holder's grant, and whose re-read reads the
// holder's row behind it. Compare their handoff-ms.
func BenchmarkHandoffWeighted(b *testing.B) {
	for _, weights := range [][]int{{1, 1}, {10, 3}} {
		b.Run(fmt.Sprintf("weights=%d,%d", weights[0], weights[1]), func(b *testing.B) {
			handoffs(b, orthrusContender(b, weights...))
		})
	}
}

func handoffs(b *testing.B, c contender) {
	holder := c.owners[0]
	if err := holder.Lock(); err != nil {
		b.Fatal(err)
	}
	samples := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		next := (i + 1) % len(c.owners)
		waiter := c.owners[next]
		done := make(chan error, 1)
		go func() { done <- waiter.Lock() }()
		c.parked(b, next)
		t0 := time.Now()
		if err := holder.Unlock(); err != nil {
			b.Fatal(err)
		}
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		samples = append(samples, time.Since(t0))
		holder = waiter
	}
	b.StopTimer()
	if err := holder.Unlock(); err != nil {
		b.Fatal(err)
	}
	slices.Sort(samples)
	b.ReportMetric(float64(samples[len(samples)/2])/float64(time.Millisecond), "handoff-ms")
}
