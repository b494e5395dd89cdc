package redis_test

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/orthrus-go/orthrus/engines/redis"
	"github.com/orthrus-go/orthrus/internal/testserver"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/inspect"
	"github.com/orthrus-go/orthrus/locker/lockertest"
)

// fairWorkerEnv carries the Redis address to a re-executed test binary,
// which then runs the worker of the test it was started for instead of
// the test (and TestMain starts no server).
const fairWorkerEnv = "REDIS_FAIR_WORKER"

func fairHarness(t *testing.T, c goredis.UniversalClient, prefix string) lockertest.Harness {
	e := newEngine(t, c, redis.WithPrefix(prefix), redis.WithFair())
	return lockertest.Harness{
		Engine: e,
		Expire: func(ctx context.Context, name string) error {
			return c.Del(ctx, e.LockKey(name)).Err()
		},
		// The queue's keys and the channel's subscribers.
		Residue: func(ctx context.Context, name string) (int, error) {
			keys, err := c.Exists(ctx, e.QueueKeys(name)...).Result()
			if err != nil {
				return 0, err
			}
			subs, err := e.Subscribers(ctx, name)
			return int(keys) + subs, err
		},
	}
}

func TestFairConformanceSingle(t *testing.T) {
	c := newSingle(t)
	lockertest.Run(t, func(t *testing.T) lockertest.Harness { return fairHarness(t, c, "conformance-fair") })
}

func TestFairConformanceCluster(t *testing.T) {
	c := newCluster(t)
	lockertest.Run(t, func(t *testing.T) lockertest.Harness { return fairHarness(t, c, "conformance-fair") })
}

// A user given only ACLCommands, its keys and its channels runs the fair
// mode too.
func TestFairConformanceRestrictedUser(t *testing.T) {
	s := testserver.Redis(t)
	appACL(t, s, "conformance")
	c := goredis.NewClient(&goredis.Options{Addr: s.Addr(), Username: "conformance", Password: "conformance-secret"})
	t.Cleanup(func() { _ = c.Close() })
	lockertest.Run(t, func(t *testing.T) lockertest.Harness { return fairHarness(t, c, "conformance") })
}

func TestFairMultiConformance(t *testing.T) {
	c := newSingle(t)
	lockertest.RunMulti(t, func(t *testing.T) lockertest.Harness { return fairHarness(t, c, "conformance-fair") })
}

func TestFairMultiConformanceCluster(t *testing.T) {
	c := newCluster(t)
	lockertest.RunMulti(t, func(t *testing.T) lockertest.Harness { return fairHarness(t, c, "conformance-fair") })
}

func fairEngine(t testing.TB) *redis.Engine {
	t.Helper()
	e := newEngine(t, newSingle(t), redis.WithFair())
	t.Cleanup(func() { _ = e.Close() })
	return e
}

// queue returns the owners queued for name, first in line first.
func queue(t *testing.T, e *redis.Engine, name string) []string {
	t.Helper()
	in, err := e.Inspect(context.Background(), name)
	if err != nil {
		t.Fatalf("Inspect() = %v", err)
	}
	owners := make([]string, len(in.Waiters))
	for i, w := range in.Waiters {
		owners[i] = w.Owner
	}
	return owners
}

// awaitQueue waits until the queue of name is want.
func awaitQueue(t *testing.T, e *redis.Engine, name string, want ...string) {
	t.Helper()
	await(t, fmt.Sprintf("queue %q", want), func() bool { return slices.Equal(queue(t, e, name), want) })
}

// Grants follow arrival order across processes: four processes queue 25
// waiters each on one name, interleaved in an order the test sets (each
// waiter is in the queue before the next starts), and record the token of
// their grant; sorted by token, the grants must come in arrival order.
func TestFairOrderAcrossProcesses(t *testing.T) {
	if addr := os.Getenv(fairWorkerEnv); addr != "" {
		fairOrderWorker(t, addr)
		return
	}
	const procs, perProc = 4, 25
	e := fairEngine(t)
	name := t.Name()
	holder, _ := e.NewLocker(name)
	lockNow(t, holder)

	workers := make([]*worker, procs)
	for i := range workers {
		workers[i] = startWorker(t, "^TestFairOrderAcrossProcesses$")
	}
	grants := make(chan string, procs*perProc)
	for _, w := range workers {
		go w.collect("grant ", grants)
	}
	var arrival []string
	for i := range procs * perProc {
		owner := fmt.Sprintf("w%03d", i)
		workers[i%procs].send(t, owner)
		arrival = append(arrival, owner)
		awaitQueue(t, e, name, arrival...)
	}
	unlockNow(t, holder)

	type grant struct {
		owner string
		token uint64
	}
	var got []grant
	timeout := time.After(60 * time.Second)
	for len(got) < procs*perProc {
		select {
		case line := <-grants:
			owner, tok, _ := strings.Cut(line, " ")
			token, err := strconv.ParseUint(tok, 10, 64)
			if err != nil {
				t.Fatalf("worker line %q: %v", line, err)
			}
			got = append(got, grant{owner, token})
		case <-timeout:
			t.Fatalf("%d grants within 60s; want %d", len(got), procs*perProc)
		}
	}
	for _, w := range workers {
		w.finish(t)
	}
	slices.SortFunc(got, func(a, b grant) int { return cmp.Compare(a.token, b.token) })
	outOfOrder := 0
	for i, g := range got {
		if g.owner != arrival[i] {
			outOfOrder++
			if outOfOrder <= 5 {
				t.Errorf("grant #%d went to %s; want %s (arrival order)", i, g.owner, arrival[i])
			}
		}
	}
	t.Logf("%d grants across %d processes, %d out of arrival order", len(got), procs, outOfOrder)
}

// fairOrderWorker queues a waiter for each line read from stdin, an owner
// and, after a space, its weight (1 when absent), and prints "grant
// <owner> <token>" as each gets the lock.
func fairOrderWorker(t *testing.T, addr string) {
	e := workerEngine(t, addr)
	name := t.Name() // the parent's
	var wg sync.WaitGroup
	var out sync.Mutex
	in := bufio.NewScanner(os.Stdin)
	fmt.Println("ready")
	for in.Scan() {
		owner, w, _ := strings.Cut(in.Text(), " ")
		weight, _ := strconv.Atoi(w)
		l, err := e.NewLocker(name, locker.WithOwner(owner), locker.WithWeight(max(weight, 1)))
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			if err := l.LockCtx(ctx); err != nil {
				t.Errorf("%s: LockCtx() = %v", owner, err)
				return
			}
			out.Lock()
			fmt.Printf("grant %s %d\n", owner, l.Token())
			out.Unlock()
			if err := l.Unlock(); err != nil {
				t.Errorf("%s: Unlock() = %v", owner, err)
			}
		}()
	}
	wg.Wait()
}

func workerEngine(t *testing.T, addr string) *redis.Engine {
	c := goredis.NewClient(&goredis.Options{Addr: addr})
	t.Cleanup(func() { _ = c.Close() })
	e, err := redis.New(c, redis.WithFair())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

// worker is a re-executed test binary running a test's worker.
type worker struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
	out   strings.Builder // everything it printed, for failures
	mu    sync.Mutex
}

// startWorker runs the test binary on the test named by pattern, as a
// worker on this package's Redis, and waits for it to print "ready".
func startWorker(t *testing.T, pattern string) *worker {
	t.Helper()
	w := &worker{lines: make(chan string, 256)}
	w.cmd = exec.Command(os.Args[0], "-test.run="+pattern, "-test.count=1")
	w.cmd.Env = append(os.Environ(), fairWorkerEnv+"="+redisAddr)
	var err error
	if w.stdin, err = w.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := w.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	w.cmd.Stderr = w.cmd.Stdout
	if err := w.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if w.cmd.ProcessState == nil {
			_ = w.cmd.Process.Kill()
			_ = w.cmd.Wait()
		}
	})
	go func() {
		defer close(w.lines)
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			w.mu.Lock()
			w.out.WriteString(s.Text() + "\n")
			w.mu.Unlock()
			w.lines <- s.Text()
		}
	}()
	w.expect(t, "ready")
	return w
}

// expect waits for the worker to print line.
func (w *worker) expect(t *testing.T, line string) {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case l, ok := <-w.lines:
			if !ok {
				t.Fatalf("worker exited before %q:\n%s", line, w.output())
			}
			if l == line {
				return
			}
		case <-timeout:
			t.Fatalf("worker did not print %q within 30s:\n%s", line, w.output())
		}
	}
}

// collect sends the rest of each line that starts with prefix to out.
func (w *worker) collect(prefix string, out chan<- string) {
	for l := range w.lines {
		if rest, ok := strings.CutPrefix(l, prefix); ok {
			out <- rest
		}
	}
}

func (w *worker) send(t *testing.T, line string) {
	t.Helper()
	if _, err := io.WriteString(w.stdin, line+"\n"); err != nil {
		t.Fatalf("writing to worker: %v", err)
	}
}

// finish closes the worker's input and waits for it to exit.
func (w *worker) finish(t *testing.T) {
	t.Helper()
	_ = w.stdin.Close()
	if err := w.cmd.Wait(); err != nil {
		t.Errorf("worker: %v\n%s", err, w.output())
	}
}

func (w *worker) output() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.out.String()
}

// A waiter whose process is killed while it is queued delays the waiters
// behind it by at most FairEviction.
func TestFairDeadWaiterEvicted(t *testing.T) {
	if addr := os.Getenv(fairWorkerEnv); addr != "" {
		fairOrderWorker(t, addr) // queues "doomed", and is killed
		return
	}
	testDeadWaiter(t, "^TestFairDeadWaiterEvicted$", false)
}

// So does a heavy waiter, ranked first, that came after a lighter one.
func TestWeightedDeadWaiterEvicted(t *testing.T) {
	if addr := os.Getenv(fairWorkerEnv); addr != "" {
		fairOrderWorker(t, addr) // queues "doomed" of weight 10, and is killed
		return
	}
	testDeadWaiter(t, "^TestWeightedDeadWaiterEvicted$", true)
}

// testDeadWaiter queues a waiter "doomed" in a worker (the test pattern
// runs), and one "behind" here: after it, or, when heavy, before it with
// doomed of weight 10; then kills the worker and times the hand-off to
// behind.
func testDeadWaiter(t *testing.T, pattern string, heavy bool) {
	e := fairEngine(t)
	name := t.Name()
	holder, _ := e.NewLocker(name)
	lockNow(t, holder)
	doomed := startWorker(t, pattern)
	behind, _ := e.NewLocker(name, locker.WithOwner("behind"))
	var done <-chan error
	if heavy {
		done = lockLater(behind)
		awaitQueue(t, e, name, "behind")
		doomed.send(t, "doomed 10")
		awaitQueue(t, e, name, "behind", "doomed")
	} else {
		doomed.send(t, "doomed")
		awaitQueue(t, e, name, "doomed")
		done = lockLater(behind)
		awaitQueue(t, e, name, "doomed", "behind")
	}

	if err := doomed.cmd.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	_ = doomed.cmd.Wait()
	released := time.Now()
	unlockNow(t, holder)
	if err := <-done; err != nil {
		t.Fatalf("LockCtx() behind the dead waiter = %v", err)
	}
	delay := time.Since(released)
	t.Logf("the queue went on %v after the release (FairEviction %v)", delay, redis.FairEviction)
	if delay > redis.FairEviction {
		t.Errorf("a dead waiter delayed the queue by %v; want at most FairEviction (%v)", delay, redis.FairEviction)
	}
	if got := queue(t, e, name); len(got) != 0 {
		t.Errorf("queue once granted = %q; want empty (the dead waiter evicted)", got)
	}
	unlockNow(t, behind)
}

// A waiter that gives up leaves the queue at once: the next gets the lock
// at the release, not after an eviction. So does a heavy waiter that came
// after the next and ranks before it.
func TestFairCancelledWaiterLeaves(t *testing.T) {
	t.Run("first", func(t *testing.T) { testCancelledLeaves(t, false) })
	t.Run("heavy", func(t *testing.T) { testCancelledLeaves(t, true) })
}

func testCancelledLeaves(t *testing.T, heavy bool) {
	e := fairEngine(t)
	name := t.Name()
	holder, _ := e.NewLocker(name)
	lockNow(t, holder)
	w := 1
	if heavy {
		w = 10
	}
	quitter, _ := e.NewLocker(name, locker.WithOwner("quitter"), locker.WithWeight(w))
	ctx, cancel := context.WithCancel(context.Background())
	quit := make(chan error, 1)
	next, _ := e.NewLocker(name, locker.WithOwner("next"))
	var done <-chan error
	if heavy {
		done = lockLater(next)
		awaitQueue(t, e, name, "next")
		go func() { quit <- quitter.LockCtx(ctx) }()
		awaitQueue(t, e, name, "next", "quitter")
	} else {
		go func() { quit <- quitter.LockCtx(ctx) }()
		awaitQueue(t, e, name, "quitter")
		done = lockLater(next)
		awaitQueue(t, e, name, "quitter", "next")
	}
	cancel()
	if err := <-quit; err != context.Canceled {
		t.Fatalf("LockCtx() cancelled = %v; want context.Canceled", err)
	}
	awaitQueue(t, e, name, "next")
	released := time.Now()
	unlockNow(t, holder)
	if err := <-done; err != nil {
		t.Fatalf("LockCtx() of the next waiter = %v", err)
	}
	if d := time.Since(released); d > time.Second {
		t.Errorf("the next waiter got the lock %v after the release; want at once", d)
	}
	unlockNow(t, next)
}

// TryLock never goes before a queued waiter, even when the lock is free
// (here, its key vanished, as when the holder's TTL ran out); it gets the
// lock once nobody waits.
func TestFairTryLockKeepsQueue(t *testing.T) {
	ctx := context.Background()
	c := newSingle(t)
	e := newEngine(t, c, redis.WithFair())
	defer e.Close()
	name := t.Name()
	holder, _ := e.NewLocker(name)
	lockNow(t, holder)
	waiter, _ := e.NewLocker(name, locker.WithOwner("waiter"))
	wctx, cancel := context.WithCancel(ctx)
	waited := make(chan error, 1)
	go func() { waited <- waiter.LockCtx(wctx) }()
	awaitQueue(t, e, name, "waiter")
	if err := c.Del(ctx, e.LockKey(name)).Err(); err != nil {
		t.Fatal(err)
	}
	late, _ := e.NewLocker(name)
	if ok, err := late.TryLock(); ok || err != nil {
		t.Fatalf("TryLock() with a waiter queued = %v, %v; want false, nil", ok, err)
	}
	cancel()
	switch err := <-waited; {
	case err == nil:
		// The name was free and the waiter first in line: it may have
		// taken the lock before the cancel.
		unlockNow(t, waiter)
	case err != context.Canceled:
		t.Fatalf("LockCtx() cancelled = %v; want context.Canceled (or nil: granted first)", err)
	}
	await(t, "TryLock() once the queue is empty", func() bool {
		ok, err := late.TryLock()
		return ok && err == nil
	})
	unlockNow(t, late)
	_ = holder.Unlock() // lost: its key was deleted
}

// A waiter evicted while alive (its process stalled past its place's
// lifetime) takes its place again, by its ticket, within a refresh period;
// on a Cluster too, where the refreshes' pipeline goes to the name's
// master.
func TestFairEvictedWaiterRequeues(t *testing.T) {
	t.Run("single", func(t *testing.T) { testEvictedRequeues(t, newSingle(t)) })
	t.Run("cluster", func(t *testing.T) { testEvictedRequeues(t, newCluster(t)) })
}

func testEvictedRequeues(t *testing.T, c goredis.UniversalClient) {
	ctx := context.Background()
	hook := &attemptHook{sha: redis.FairAcquireSHA()}
	c.AddHook(hook)
	e := newEngine(t, c, redis.WithFair())
	defer e.Close()
	name := t.Name()
	holder, _ := e.NewLocker(name)
	lockNow(t, holder)
	before := hook.n.Load()
	waiter, _ := e.NewLocker(name, locker.WithOwner("waiter"))
	done := lockLater(waiter)
	// The first waiter of a channel tries once more after subscribing:
	// then it waits, and only the refresh can bring it back.
	await(t, "the waiter's two attempts", func() bool { return hook.n.Load()-before == 2 })
	awaitQueue(t, e, name, "waiter")
	in, err := e.Inspect(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	ticket := in.Waiters[0].Token
	// What an eviction does.
	if err := c.Del(ctx, e.QueueKeys(name)...).Err(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	awaitQueue(t, e, name, "waiter")
	t.Logf("queued again after %v", time.Since(start))
	if in, err := e.Inspect(ctx, name); err != nil || in.Waiters[0].Token != ticket {
		t.Fatalf("Inspect() once queued again = %+v, %v; want the waiter with its ticket %d", in, err, ticket)
	}
	unlockNow(t, holder)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	unlockNow(t, waiter)
}

// Re-entry costs no place in the queue, and every grant's token exceeds
// the tickets of the waiters (Inspect shows them as Token).
func TestFairReentryAndTokens(t *testing.T) {
	e := fairEngine(t)
	name := t.Name()
	a, _ := e.NewLocker(name)
	lockNow(t, a)
	lockNow(t, a)
	b, _ := e.NewLocker(name, locker.WithOwner("b"))
	done := lockLater(b)
	awaitQueue(t, e, name, "b")
	in, err := e.Inspect(context.Background(), name)
	if err != nil || in.Holder == nil || in.Holder.Token != a.Token() || len(in.Waiters) != 1 || in.Waiters[0].Token <= a.Token() {
		t.Fatalf("Inspect() = %+v, %v; want a holding with token %d, b queued with a higher ticket", in, err, a.Token())
	}
	unlockNow(t, a)
	select {
	case err := <-done:
		t.Fatalf("LockCtx() of b returned %v while a still held once", err)
	case <-time.After(50 * time.Millisecond):
	}
	unlockNow(t, a)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if b.Token() <= in.Waiters[0].Token {
		t.Errorf("b's token %d; want above its ticket %d", b.Token(), in.Waiters[0].Token)
	}
	unlockNow(t, b)
}

// WithFair makes the engine say so.
func TestWithFair(t *testing.T) {
	c := newSingle(t)
	for _, fair := range []bool{false, true} {
		var opts []redis.Option
		if fair {
			opts = append(opts, redis.WithFair())
		}
		e := newEngine(t, c, opts...)
		if got := e.Fair(); got != fair {
			t.Errorf("Fair() = %v; want %v", got, fair)
		}
		_ = e.Close()
	}
}

// Waiters are told their turn one by one: each makes its first attempt,
// maybe one more after subscribing, and one when its turn comes (3n, and
// a little room); a herd would make every waiter try at every release
// (n²/2 more).
func TestFairNoHerd(t *testing.T) {
	const waiters = 50
	c := newSingle(t)
	hook := &attemptHook{sha: redis.FairAcquireSHA()}
	c.AddHook(hook)
	e := newEngine(t, c, redis.WithFair())
	defer e.Close()
	name := t.Name()
	holder, _ := e.NewLocker(name)
	lockNow(t, holder)
	before := hook.n.Load()
	errs := make(chan error, waiters)
	for range waiters {
		l, _ := e.NewLocker(name)
		go func() {
			if err := <-lockLater(l); err != nil {
				errs <- err
				return
			}
			errs <- l.Unlock()
		}()
	}
	await(t, "every waiter parked", func() bool { return e.Parked(inspect.KindMutex, name) == waiters })
	unlockNow(t, holder)
	for range waiters {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	got := hook.n.Load() - before
	t.Logf("%d acquire attempts for %d waiters", got, waiters)
	if got > 4*waiters {
		t.Errorf("%d acquire attempts for %d waiters handed the lock one by one; want at most %d", got, waiters, 4*waiters)
	}
}

// A fair engine queues its waiters in Redis, strictly first come, first
// served across processes; Inspect lists the queue.
func ExampleWithFair() {
	client := goredis.NewClient(&goredis.Options{Addr: redisAddr})
	defer client.Close()
	engine, err := redis.New(client, redis.WithFair(), redis.WithPrefix("example-fair"))
	if err != nil {
		log.Fatal(err)
	}
	defer engine.Close()

	holder, _ := engine.NewLocker("reports/daily")
	if err := holder.Lock(); err != nil {
		log.Fatal(err)
	}
	waiter, _ := engine.NewLocker("reports/daily", locker.WithOwner("worker-1"))
	done := make(chan error, 1)
	go func() { done <- waiter.Lock() }()
	for {
		in, err := engine.Inspect(context.Background(), "reports/daily")
		if err != nil {
			log.Fatal(err)
		}
		if len(in.Waiters) == 1 {
			fmt.Println("queued:", in.Waiters[0].Owner)
			break
		}
		time.Sleep(10 * time.Millisecond)
	}

	// A late comer's TryLock does not go before the queue.
	late, _ := engine.NewLocker("reports/daily")
	_ = holder.Unlock()
	ok, _ := late.TryLock()
	fmt.Println("late TryLock:", ok)
	if err := <-done; err != nil {
		log.Fatal(err)
	}
	fmt.Println("held by worker-1:", waiter.Token() > 0)
	_ = waiter.Unlock()
	// Output:
	// queued: worker-1
	// late TryLock: false
	// held by worker-1: true
}

// BenchmarkFairHandoff compares the hand-off of the fair mode with the
// default mode's (see benchModes), and reports fair/default.
func BenchmarkFairHandoff(b *testing.B) {
	p50 := benchModes(b, []handoffMode{{name: "default"}, {name: "fair", opts: []redis.Option{redis.WithFair()}}})
	if p50 != nil {
		b.ReportMetric(p50[1]/p50[0], "fair/default")
	}
}

// BenchmarkFairHandoffWeighted compares, on fair engines, the hand-off
// among owners of weights 1, 3, 2, 10, 1, 3, 2, 10 (weighted: a release
// wakes the heaviest waiter, ranked before older ones) with that among
// owners of weight 1 (unweighted), and reports weighted/unweighted.
func BenchmarkFairHandoffWeighted(b *testing.B) {
	fair := []redis.Option{redis.WithFair()}
	p50 := benchModes(b, []handoffMode{{name: "unweighted", opts: fair}, {name: "weighted", opts: fair, weights: []int{1, 3, 2, 10}}})
	if p50 != nil {
		b.ReportMetric(p50[1]/p50[0], "weighted/unweighted")
	}
}

// BenchmarkFairLockUnlock is BenchmarkLockUnlock's uncontended cycle on a
// fair engine: its acquire and release scripts, with no queue to read.
func BenchmarkFairLockUnlock(b *testing.B) {
	e := newEngine(b, benchClient(b, true), redis.WithFair())
	b.Cleanup(func() { _ = e.Close() })
	l, err := e.NewLocker(benchName(b))
	if err != nil {
		b.Fatal(err)
	}
	cycle(b, l) // connection warm
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		cycle(b, l)
	}
}

// handoffMode is one way for owners to take turns in benchModes: the
// engine's options, and the weights of its owners in turn (none: 1).
type handoffMode struct {
	name    string
	opts    []redis.Option
	weights []int
}

// benchModes has eight owners take turns on one name in each mode, in
// chunks of 50 turns alternating between the modes, so that a busy machine
// slows all alike. It reports each mode's median hand-off (<mode>-ms; see
// BenchmarkHandoff), how often the owner that released got the lock again
// (a fair lock never gives it back while others wait), and the acquire
// attempts per grant; it returns the medians (nil when b.N is too small).
func benchModes(b *testing.B, modes []handoffMode) []float64 {
	const owners, chunk = 8, 50
	sets := make([][]lockertest.Mutex, len(modes))
	hooks := make([]*attemptHook, len(modes))
	for i, m := range modes {
		c := benchClient(b, true)
		hooks[i] = &attemptHook{sha: redis.AcquireSHA(inspect.KindMutex)}
		if len(m.opts) > 0 {
			hooks[i].sha = redis.FairAcquireSHA()
		}
		c.AddHook(hooks[i])
		e := newEngine(b, c, m.opts...)
		b.Cleanup(func() { _ = e.Close() })
		name := benchName(b)
		for j := range owners {
			w := 1
			if len(m.weights) > 0 {
				w = m.weights[j%len(m.weights)]
			}
			l, err := e.NewLocker(name, locker.WithWeight(w))
			if err != nil {
				b.Fatal(err)
			}
			sets[i] = append(sets[i], l)
		}
		if _, err := takeTurns(sets[i], chunk); err != nil { // warm
			b.Fatal(err)
		}
	}
	all := make([]turns, len(modes))
	for _, h := range hooks {
		h.n.Store(0)
	}
	b.ResetTimer()
	for done := 0; done < b.N; done += chunk {
		for i := range modes {
			s, err := takeTurns(sets[i], min(chunk, b.N-done))
			if err != nil {
				b.Fatal(err)
			}
			all[i].handoffs = append(all[i].handoffs, s.handoffs...)
			all[i].waits = append(all[i].waits, s.waits...)
			all[i].self += s.self
		}
	}
	b.StopTimer()
	for i := range modes {
		if len(all[i].handoffs) == 0 {
			return nil // too few turns (b.N = 1)
		}
	}
	p50 := make([]float64, len(modes))
	for i, m := range modes {
		p50[i] = median(all[i].handoffs)
		b.ReportMetric(p50[i], m.name+"-ms")
		b.ReportMetric(100*float64(all[i].self)/float64(len(all[i].waits)), m.name+"-self-%")
		b.ReportMetric(float64(hooks[i].n.Load())/float64(len(all[i].waits)), m.name+"-attempts/grant")
	}
	return p50
}

// BenchmarkFairPassThrough parks 1,000 waiters of one process, each with
// a Locker of its own, behind a holder, and times them through once the
// holder releases: each waiter locks and unlocks. Each iteration runs the
// default mode, then the fair mode (in turn first), and reports the time
// each took (default-s, fair-s) and its acquire attempts per grant.
func BenchmarkFairPassThrough(b *testing.B) {
	const waiters = 1000
	type mode struct {
		name string
		fair bool
	}
	modes := []mode{{"default", false}, {"fair", true}}
	spent := make([]time.Duration, len(modes))
	attempts := make([]float64, len(modes))
	for i := 0; i < b.N; i++ {
		for j := range modes {
			k := (i + j) % len(modes)
			d, per, err := passThrough(b, waiters, modes[k].fair)
			if err != nil {
				b.Fatal(err)
			}
			spent[k] += d
			attempts[k] += per
		}
	}
	for k, m := range modes {
		b.ReportMetric(spent[k].Seconds()/float64(b.N), m.name+"-s")
		b.ReportMetric(attempts[k]/float64(b.N), m.name+"-attempts/grant")
	}
}

// passThrough times n parked waiters through one name and counts their
// acquire attempts per grant from the release on.
func passThrough(b *testing.B, n int, fair bool) (time.Duration, float64, error) {
	c := goredis.NewClient(&goredis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer c.Close()
	sha := redis.AcquireSHA(inspect.KindMutex)
	var opts []redis.Option
	if fair {
		sha, opts = redis.FairAcquireSHA(), []redis.Option{redis.WithFair()}
	}
	hook := &attemptHook{sha: sha}
	c.AddHook(hook)
	e := newEngine(b, c, opts...)
	defer e.Close()
	name := benchName(b)
	holder, _ := e.NewLocker(name)
	if err := holder.Lock(); err != nil {
		return 0, 0, err
	}
	errs := make(chan error, n)
	for range n {
		l, _ := e.NewLocker(name)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			err := l.LockCtx(ctx)
			if err == nil {
				err = l.Unlock()
			}
			errs <- err
		}()
	}
	// Parked, and done with the attempts that follow joining: no attempt
	// for 100ms.
	deadline := time.Now().Add(time.Minute)
	for before := int64(-1); e.Parked(inspect.KindMutex, name) < n || hook.n.Load() != before; {
		if time.Now().After(deadline) {
			return 0, 0, errors.New("waiters not parked within a minute")
		}
		before = hook.n.Load()
		time.Sleep(100 * time.Millisecond)
	}
	before := hook.n.Load()
	start := time.Now()
	if err := holder.Unlock(); err != nil {
		return 0, 0, err
	}
	for range n {
		if err := <-errs; err != nil {
			return 0, 0, err
		}
	}
	return time.Since(start), float64(hook.n.Load()-before) / float64(n), nil
}
