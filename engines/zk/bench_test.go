package zk_test

import (
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gozk "github.com/go-zookeeper/zk"
	"golang.org/x/sync/errgroup"

	"github.com/orthrus-go/orthrus/engines/zk"
	"github.com/orthrus-go/orthrus/internal/benchround"
	"github.com/orthrus-go/orthrus/internal/testserver"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/lockertest"
)

// BenchmarkLockUnlock: one owner takes and releases one name, uncontended,
// through orthrus and through go-zookeeper's own lock recipe.
func BenchmarkLockUnlock(b *testing.B) {
	for _, im := range implementations(b) {
		b.Run(im.name, func(b *testing.B) {
			lockUnlock(b, im.mutex(b)("uncontended"))
		})
	}
}

// BenchmarkLockUnlockParallel: eight goroutines, each taking and releasing
// a name of its own, uncontended, over one session: orthrus's engine and
// go-zookeeper's lock recipe on one shared connection.
func BenchmarkLockUnlockParallel(b *testing.B) {
	for _, im := range implementations(b) {
		b.Run(im.name, func(b *testing.B) {
			parallel(b, im.mutex(b))
		})
	}
}

// BenchmarkAlternating runs the uncontended cycle of orthrus and of
// go-zookeeper's recipe in turn, cycle by cycle, so that a busy machine
// (and the JVM's pauses) slow both alike, and reports orthrus's throughput
// relative to the peer's (x-gozk).
func BenchmarkAlternating(b *testing.B) {
	mk := alternated(b)
	benchround.ReportRelative(b, []string{"orthrus", "gozk"}, benchround.Alternate(b, mk("alternating")))
}

// BenchmarkAlternatingParallel is BenchmarkAlternating by eight owners at
// once, each on names of its own, over one session per implementation, as
// BenchmarkLockUnlockParallel: orthrus's throughput in parallel relative
// to the peer's (x-gozk), both under the same load at the same time.
func BenchmarkAlternatingParallel(b *testing.B) {
	mk := alternated(b)
	spent := benchround.AlternateParallel(b, goroutines, func(i int) []benchround.Mutex {
		return mk(fmt.Sprintf("alternating-parallel-%d", i))
	})
	benchround.ReportRelative(b, []string{"orthrus", "gozk"}, spent)
}

// alternated returns the maker of orthrus's and the peer's mutex of a
// name, in that order, each implementation over one session.
func alternated(b *testing.B) func(name string) []benchround.Mutex {
	var mks [2]func(string) lockertest.Mutex
	for _, im := range implementations(b) {
		i := 0
		if im.name == "gozk" {
			i = 1
		}
		mks[i] = im.mutex(b)
	}
	return func(name string) []benchround.Mutex {
		return []benchround.Mutex{mks[0](name), mks[1](name)}
	}
}

// implementation makes, for one sub-benchmark, the mutexes of one name each
// over one session.
type implementation struct {
	name  string
	mutex func(b *testing.B) func(name string) lockertest.Mutex
}

// implementations are orthrus and go-zookeeper's recipe, in an order that
// scripts/bench rotates from round to round, on a server whose JVM has
// compiled its hot paths: whichever ran first used to pay for that.
func implementations(b *testing.B) []implementation {
	warmServer(b)
	return benchround.Rotate([]implementation{
		{"orthrus", func(b *testing.B) func(string) lockertest.Mutex {
			e := newEngine(b, []string{zkAddr}, zk.WithPrefix("/bench"))
			b.Cleanup(func() { _ = e.Close() })
			return func(name string) lockertest.Mutex {
				l, _ := e.NewLocker(name)
				return l
			}
		}},
		{"gozk", func(b *testing.B) func(string) lockertest.Mutex {
			c := admin(b)
			return func(name string) lockertest.Mutex {
				return gozk.NewLock(c, "/bench-gozk/"+name, gozk.WorldACL(gozk.PermAll))
			}
		}},
	})
}

var warmed sync.Once

// warmServer runs, once per process, the requests of a lock and unlock
// (create, list, delete) from 8 goroutines, 1,000 each: about the JVM's
// compile thresholds.
func warmServer(b *testing.B) {
	warmed.Do(func() {
		c := admin(b)
		var g errgroup.Group
		for i := range goroutines {
			g.Go(func() error {
				l := gozk.NewLock(c, fmt.Sprintf("/bench-warm/%d", i), gozk.WorldACL(gozk.PermAll))
				for range 1000 {
					if err := cycle(l); err != nil {
						return err
					}
				}
				return nil
			})
		}
		if err := g.Wait(); err != nil {
			b.Fatal(err)
		}
	})
}

// goroutines is how many owners BenchmarkLockUnlockParallel runs, whatever
// GOMAXPROCS, so that runs on different machines compare.
const goroutines = 8

// parallel runs lockUnlock on goroutines owners, each made by mk for a
// name of its own.
func parallel(b *testing.B, mk func(name string) lockertest.Mutex) {
	var ids atomic.Int64
	b.SetParallelism((goroutines + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
	defer cpuPerOp(b)()
	b.RunParallel(func(pb *testing.PB) {
		m := mk(fmt.Sprintf("parallel-%d", ids.Add(1)))
		var err error
		for err == nil && pb.Next() {
			err = cycle(m)
		}
		if err != nil {
			b.Error(err)
		}
	})
}

// cycle locks m and unlocks it.
func cycle(m lockertest.Mutex) error {
	if err := m.Lock(); err != nil {
		return err
	}
	return m.Unlock()
}

func lockUnlock(b *testing.B, m lockertest.Mutex) {
	for b.Loop() {
		if err := cycle(m); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHandoff: eight owners, each with its own session, contend for
// one name; handoff-ms is the median time from one owner's Unlock to the
// next owner's Lock returning. go-zookeeper's Lock is a lockertest.Mutex
// as it is.
func BenchmarkHandoff(b *testing.B) {
	const owners = 8
	b.Run("orthrus", func(b *testing.B) {
		ms := make([]lockertest.Mutex, owners)
		for i := range ms {
			e := newEngine(b, []string{zkAddr}, zk.WithPrefix("/bench"))
			defer e.Close()
			ms[i], _ = e.NewLocker("contended")
		}
		lockertest.Handoff(b, ms)
	})
	b.Run("gozk", func(b *testing.B) {
		ms := make([]lockertest.Mutex, owners)
		for i := range ms {
			ms[i] = gozk.NewLock(admin(b), "/bench-gozk/contended", gozk.WorldACL(gozk.PermAll))
		}
		lockertest.Handoff(b, ms)
	})
}

// cpuPerOp reports, when the returned function is called, the CPU time per
// operation this process (client-µs) and the ZooKeeper server (server-µs)
// spent since: on a machine of few cores the two compete, and wall time
// alone does not tell which side a change saved.
func cpuPerOp(b *testing.B) func() {
	client, server := clientCPU(b), serverCPU(b)
	return func() {
		n := float64(b.N) * float64(time.Microsecond)
		b.ReportMetric(float64(clientCPU(b)-client)/n, "client-µs/op")
		b.ReportMetric(float64(serverCPU(b)-server)/n, "server-µs/op")
	}
}

func clientCPU(b *testing.B) time.Duration {
	d, err := testserver.ProcessCPU(os.Getpid())
	if err != nil {
		b.Fatal(err)
	}
	return d
}

func serverCPU(b *testing.B) time.Duration {
	d, err := standalone.CPU()
	if err != nil {
		b.Fatal(err)
	}
	return d
}

// BenchmarkHandoffWeighted is the hand-off among four owners, each with
// its own session, of weights 1, 3, 2 and 10 ("weighted": each grant goes
// to the heaviest waiter, and the three heavy owners look before they
// queue) and, in the same run, of weight 1 each ("unweighted").
// creates/heavy-lock is how many creates a heavy owner's Lock took: above
// 1, its queue changed between its look and its create.
func BenchmarkHandoffWeighted(b *testing.B) {
	for _, bc := range []struct {
		name    string
		weights []int
	}{{"unweighted", []int{1, 1, 1, 1}}, {"weighted", []int{1, 3, 2, 10}}} {
		b.Run(bc.name, func(b *testing.B) {
			ms := make([]lockertest.Mutex, len(bc.weights))
			es := make([]*zk.Engine, len(bc.weights))
			var heavyLocks atomic.Int64
			for i, w := range bc.weights {
				es[i] = newEngine(b, []string{zkAddr}, zk.WithPrefix("/bench"))
				defer es[i].Close()
				l, err := es[i].NewLocker("contended-weighted", locker.WithWeight(w))
				if err != nil {
					b.Fatal(err)
				}
				ms[i] = l
				if w > 1 {
					ms[i] = countedLock{l, &heavyLocks}
				}
			}
			lockertest.Handoff(b, ms)
			var tries int64
			for _, e := range es {
				tries += e.HeavyTries()
			}
			if n := heavyLocks.Load(); n > 0 {
				b.ReportMetric(float64(tries)/float64(n), "creates/heavy-lock")
			}
		})
	}
}

// countedLock counts the Lock calls of a Mutex.
type countedLock struct {
	lockertest.Mutex
	n *atomic.Int64
}

func (c countedLock) Lock() error {
	c.n.Add(1)
	return c.Mutex.Lock()
}
