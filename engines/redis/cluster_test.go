package redis_test

import (
	"context"
	"errors"
	"fmt"
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
	"github.com/orthrus-go/orthrus/locker/observe"
)

// The tests here move slots and kill nodes: each runs on a Redis Cluster
// of its own, not the one TestMain shares.

// clusterClient is a client of c with config.Open's retry settings (a
// dead node fails a command at once rather than after go-redis's retries),
// changed by opts. After as many failed dials as its size, a node's pool
// (or its pipeline pool) redials in the background every second until a
// dial works, and that goroutine outlives Close by up to a second, which
// goleak reports when the test runs last: the pool sizes keep the tests'
// failed dials to a dead node below that.
func clusterClient(t *testing.T, c *testserver.Cluster, opts ...func(*goredis.ClusterOptions)) *goredis.ClusterClient {
	o := &goredis.ClusterOptions{
		Addrs:            c.Addrs(),
		DialTimeout:      300 * time.Millisecond,
		ReadTimeout:      time.Second,
		DialerRetries:    1,
		MaxRetries:       -1,
		PoolSize:         10000,
		PipelinePoolSize: 10000,
	}
	for _, opt := range opts {
		opt(o)
	}
	cc := goredis.NewClusterClient(o)
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// nodeClient is a client of the one node at addr, for CLUSTER commands.
func nodeClient(t *testing.T, addr string) *goredis.Client {
	c := goredis.NewClient(&goredis.Options{Addr: addr, DialerRetries: 1, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// masterOf returns the index in c.Servers of the master that serves key.
func masterOf(ctx context.Context, t *testing.T, c *testserver.Cluster, cc *goredis.ClusterClient, key string) int {
	t.Helper()
	cc.ReloadState(ctx)
	m, err := cc.MasterForKey(ctx, key)
	if err != nil {
		t.Fatalf("MasterForKey(%q) = %v", key, err)
	}
	for i, s := range c.Servers {
		if s.Addr() == m.Options().Addr {
			return i
		}
	}
	t.Fatalf("MasterForKey(%q) = %s, not a server of the cluster %v", key, m.Options().Addr, c.Addrs())
	return -1
}

// pollFor calls check every 50ms until it returns nil, and fails the test
// with its last error after timeout: for cluster states that nothing
// announces.
func pollFor(t *testing.T, timeout time.Duration, what string, check func(context.Context) error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := check(ctx)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %v", what, timeout, err)
		}
		<-tick.C
	}
}

// clusterState checks that c's node reports cluster_state:ok.
func clusterState(c *goredis.Client) func(context.Context) error {
	return func(ctx context.Context) error {
		info, err := c.ClusterInfo(ctx).Result()
		if err != nil {
			return err
		}
		if !strings.Contains(info, "cluster_state:ok") {
			return errors.New("cluster_state not ok")
		}
		return nil
	}
}

// holdOrFail takes the lock name on e with ttl, or fails the test.
func holdOrFail(t *testing.T, e *redis.Engine, name string, ttl time.Duration) locker.Locker {
	t.Helper()
	l, err := e.NewLocker(name, locker.WithTTL(ttl))
	if err != nil {
		t.Fatalf("NewLocker(%q) = %v", name, err)
	}
	if ok, err := l.TryLock(); !ok || err != nil {
		t.Fatalf("TryLock(%q) = %v, %v; want true, nil", name, ok, err)
	}
	return l
}

// renewals is a observe.Observer that signals each renewal that succeeded,
// without blocking (Observer methods run on the renewal loop), and counts
// them by hold.
type renewals struct {
	ok     chan struct{}
	mu     sync.Mutex
	n      map[string]int // by name and token
	failed map[string]int // failed renewal calls, by name and token
}

func newRenewals() *renewals {
	return &renewals{ok: make(chan struct{}, 1), n: map[string]int{}, failed: map[string]int{}}
}

// failures is the number of failed renewals of the hold of name with token.
func (r *renewals) failures(name string, token uint64) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failed[name+"#"+strconv.FormatUint(token, 10)]
}

// count is the number of successful renewals of the hold of name with
// token.
func (r *renewals) count(name string, token uint64) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n[name+"#"+strconv.FormatUint(token, 10)]
}

func (r *renewals) AcquireStart(ctx context.Context, _ observe.Acquisition) context.Context {
	return ctx
}
func (r *renewals) AcquireEnd(context.Context, observe.Acquisition, observe.AcquireResult) {}
func (r *renewals) ReleaseStart(ctx context.Context, _ observe.HoldInfo) context.Context {
	return ctx
}
func (r *renewals) ReleaseEnd(context.Context, observe.HoldInfo, error)        {}
func (r *renewals) HoldEnd(observe.HoldInfo, time.Duration, observe.LostCause) {}
func (r *renewals) Renewed(h observe.HoldInfo, err error) {
	if err != nil {
		r.mu.Lock()
		r.failed[h.Name+"#"+strconv.FormatUint(h.Token, 10)]++
		r.mu.Unlock()
	}
	if err == nil {
		r.mu.Lock()
		r.n[h.Name+"#"+strconv.FormatUint(h.Token, 10)]++
		r.mu.Unlock()
		select {
		case r.ok <- struct{}{}:
		default:
		}
	}
}

// await drops a signal already sent, then waits for two successful
// renewals. With one hold renewing, the second started after the first had
// ended, so after await was called: it went through whatever state the
// cluster is in now.
func (r *renewals) await(t *testing.T, what string) {
	t.Helper()
	select {
	case <-r.ok:
	default:
	}
	for range 2 {
		select {
		case <-r.ok:
		case <-time.After(10 * time.Second):
			t.Fatalf("no renewal %s within 10s", what)
		}
	}
}

// A held lock's slot moves to another master while its holder renews it:
// MIGRATING/IMPORTING, MIGRATE of its keys (the lock and its fencing
// counter share the slot), SETSLOT NODE. Renewals keep working through the
// ASK and MOVED redirections; the hold keeps its token and is not lost;
// another owner, trying and waiting, stays out until Unlock, and the
// waiter's engine subscribes to the wake-up channel again on the new
// master; and the counter moved with the lock, so the next token follows
// from it.
func TestClusterSlotMigration(t *testing.T) {
	c := testserver.RedisCluster(t, 3)
	cc := clusterClient(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	obs := newRenewals()
	holders := newEngine(t, cc, redis.WithPrefix("migrate"), redis.WithObserver(obs))
	defer holders.Close()
	contenders := newEngine(t, clusterClient(t, c), redis.WithPrefix("migrate"), redis.WithName("contender"))
	defer contenders.Close()

	const name, ttl = "orders/42", 900 * time.Millisecond // renewed every 300ms
	holder := holdOrFail(t, holders, name, ttl)
	token := lease(holder).Token()
	key := holders.LockKey(name)
	slot, err := cc.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		t.Fatalf("CLUSTER KEYSLOT: %v", err)
	}
	from := masterOf(ctx, t, c, cc, key)
	to := (from + 1) % len(c.Servers)
	src, dst := nodeClient(t, c.Servers[from].Addr()), nodeClient(t, c.Servers[to].Addr())
	srcID, err := src.ClusterMyID(ctx).Result()
	if err != nil {
		t.Fatalf("CLUSTER MYID: %v", err)
	}
	dstID, err := dst.ClusterMyID(ctx).Result()
	if err != nil {
		t.Fatalf("CLUSTER MYID: %v", err)
	}

	// A waiter of the other process is queued for the whole migration.
	waiter, _ := contenders.NewLocker(name)
	waited := make(chan error, 1)
	go func() { waited <- waiter.LockCtx(ctx) }()
	tryer, _ := contenders.NewLocker(name)
	excluded := func(step string) {
		t.Helper()
		obs.await(t, step)
		if ok, err := tryer.TryLock(); ok || err != nil {
			t.Errorf("%s: contender TryLock() = %v, %v; want false, nil", step, ok, err)
			if ok {
				_ = tryer.Unlock()
			}
		}
		select {
		case err := <-waited:
			t.Fatalf("%s: the waiter's LockCtx() returned %v while the lock was held", step, err)
		case <-lease(holder).Lost():
			t.Fatalf("%s: Lost() closed; want the hold kept", step)
		default:
		}
	}
	excluded("before the migration")

	admin := func(c *goredis.Client, args ...any) {
		t.Helper()
		if err := c.Do(ctx, args...).Err(); err != nil {
			t.Fatalf("%v on %s: %v", args, c.Options().Addr, err)
		}
	}
	admin(dst, "CLUSTER", "SETSLOT", slot, "IMPORTING", srcID)
	admin(src, "CLUSTER", "SETSLOT", slot, "MIGRATING", dstID)
	excluded("with the slot migrating, its keys on the source")

	keys, err := src.ClusterGetKeysInSlot(ctx, int(slot), 10).Result()
	if err != nil {
		t.Fatalf("CLUSTER GETKEYSINSLOT: %v", err)
	}
	slices.Sort(keys)
	if want := []string{key, key + ":fence"}; !slices.Equal(keys, want) {
		t.Fatalf("keys in slot %d = %q; want %q", slot, keys, want)
	}
	host, port, _ := strings.Cut(c.Servers[to].Addr(), ":")
	migrate := []any{"MIGRATE", host, port, "", 0, 5000, "KEYS"}
	for _, k := range keys {
		migrate = append(migrate, k)
	}
	admin(src, migrate...) // both keys at once: a script never sees them apart
	excluded("with the keys moved, the slot still migrating (ASK)")

	// The new owner first, so that the slot has an owner throughout.
	for _, n := range []int{to, from, 3 - from - to} {
		admin(nodeClient(t, c.Servers[n].Addr()), "CLUSTER", "SETSLOT", slot, "NODE", dstID)
	}
	excluded("with the slot moved (MOVED)")

	if got := masterOf(ctx, t, c, cc, key); got != to {
		t.Errorf("the lock's master after the migration = %s; want %s", c.Servers[got], c.Servers[to])
	}
	if got := lease(holder).Token(); got != token {
		t.Errorf("Token() after the migration = %d; want %d", got, token)
	}
	in, err := contenders.Inspect(ctx, name)
	if err != nil || in.Holder == nil || in.Holder.Token != token {
		t.Errorf("Inspect() = %+v, %v; want the hold with token %d", in, err, token)
	}
	// The old master dropped the waiter's subscription when the slot left;
	// the waiter's engine subscribes again on the new one, so that the
	// release's message reaches it.
	ch := contenders.Channel(name)
	pollFor(t, 10*time.Second, "the waiter subscribed on the new master", func(ctx context.Context) error {
		n, err := dst.PubSubShardNumSub(ctx, ch).Result()
		if err == nil && n[ch] != 1 {
			err = fmt.Errorf("PUBSUB SHARDNUMSUB %s = %d; want 1", ch, n[ch])
		}
		return err
	})
	if err := holder.Unlock(); err != nil {
		t.Fatalf("Unlock() = %v", err)
	}
	released := time.Now()
	select {
	case err := <-waited:
		if err != nil {
			t.Fatalf("waiter LockCtx() = %v", err)
		}
	case <-time.After(ttl + 5*time.Second):
		t.Fatalf("the waiter did not get the lock within %v of Unlock", ttl+5*time.Second)
	}
	t.Logf("the waiter got the lock %v after Unlock", time.Since(released))
	// The counter moved with the lock: the next token follows from it,
	// where a new counter would start from the clock, seconds ahead.
	if got := lease(waiter).Token(); got <= token || got > token+1000 {
		t.Errorf("the waiter's token = %d; want a little above the holder's %d", got, token)
	}
	if err := waiter.Unlock(); err != nil {
		t.Errorf("waiter Unlock() = %v", err)
	}
}

// The master that holds a lock's slot dies (SIGKILL) in a cluster without
// replicas. Its holds are gone with it: the holder's renewals fail and Lost
// closes by the end of the TTL; nobody gets the lock meanwhile (the slot
// has no master). With cluster-require-full-coverage yes (Redis's default)
// the other masters refuse every command too once the cluster marks the
// master failed, so their holds are lost as well; with "no" they are kept.
// The node comes back empty (no persistence): the lock is free, and the
// next owner's token is higher than the lost one's.
func TestClusterMasterKilled(t *testing.T) {
	for _, fullCoverage := range []bool{true, false} {
		t.Run(fmt.Sprintf("full-coverage=%v", fullCoverage), func(t *testing.T) {
			var opts []testserver.Option
			if !fullCoverage {
				opts = append(opts, testserver.WithArgs("--cluster-require-full-coverage", "no"))
			}
			c := testserver.RedisCluster(t, 3, opts...)
			cc := clusterClient(t, c)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			obs := newRenewals()
			holders := newEngine(t, cc, redis.WithPrefix("kill"), redis.WithLogger(quietLog), redis.WithObserver(obs))
			defer holders.Close()
			contenders := newEngine(t, clusterClient(t, c), redis.WithPrefix("kill"), redis.WithName("contender"))
			defer contenders.Close()

			const ttl = 1500 * time.Millisecond
			hold := func(name string) locker.Locker { return holdOrFail(t, holders, name, ttl) }
			victim := hold("orders/42")
			lostToken := lease(victim).Token()
			dead := masterOf(ctx, t, c, cc, holders.LockKey("orders/42"))
			// A name on another master.
			var other string
			for i := 0; other == ""; i++ {
				if n := fmt.Sprintf("other/%d", i); masterOf(ctx, t, c, cc, holders.LockKey(n)) != dead {
					other = n
				}
			}
			bystander := hold(other)
			obs.await(t, "before the kill")

			if err := c.Servers[dead].Kill(); err != nil {
				t.Fatal(err)
			}
			killed := time.Now()
			// The live masters forget their scripts: renewals and
			// releases of their holds must get each one there again
			// while a node is dead (SCRIPT LOAD on a ClusterClient goes
			// to every master, and fails).
			for i, s := range c.Servers {
				if i != dead {
					if err := nodeClient(t, s.Addr()).ScriptFlush(ctx).Err(); err != nil {
						t.Fatalf("SCRIPT FLUSH on %s: %v", s, err)
					}
				}
			}
			contender, _ := contenders.NewLocker("orders/42")
			if ok, err := contender.TryLock(); ok || !errors.Is(err, locker.ErrUnavailable) {
				t.Errorf("contender TryLock() with the master dead = %v, %v; want false, ErrUnavailable", ok, err)
			}
			select {
			case <-lease(victim).Lost():
				// Lost at the deadline of the last renewal that worked,
				// at most a TTL after the kill.
				if d := time.Since(killed); d > ttl+500*time.Millisecond {
					t.Errorf("Lost() closed %v after the kill; want within the TTL %v", d, ttl)
				}
			case <-time.After(ttl + 5*time.Second):
				t.Fatalf("Lost() not closed %v after the kill", ttl+5*time.Second)
			}
			if err := victim.Unlock(); !errors.Is(err, locker.ErrLockLost) {
				t.Errorf("Unlock() of the lost hold = %v; want ErrLockLost", err)
			}

			survivor := nodeClient(t, c.Servers[(dead+1)%len(c.Servers)].Addr())
			if fullCoverage {
				select {
				case <-lease(bystander).Lost():
				case <-time.After(ttl + 10*time.Second):
					t.Fatalf("a hold on a live master: Lost() not closed; want it lost to CLUSTERDOWN")
				}
				if err := survivor.Ping(ctx).Err(); err != nil {
					t.Fatalf("PING the survivor: %v", err)
				}
				if err := survivor.Get(ctx, "x").Err(); !goredis.IsClusterDownError(err) {
					t.Errorf("GET on a live master = %v; want CLUSTERDOWN", err)
				}
				if err := bystander.Unlock(); !errors.Is(err, locker.ErrLockLost) {
					t.Errorf("Unlock() of the hold lost to CLUSTERDOWN = %v; want ErrLockLost", err)
				}
			} else {
				// Past the failure detection, renewals keep the hold.
				pollFor(t, 10*time.Second, "the cluster marks the master failed", func(ctx context.Context) error {
					nodes, err := survivor.ClusterNodes(ctx).Result()
					if err != nil {
						return err
					}
					for _, line := range strings.Split(nodes, "\n") {
						if strings.Contains(line, c.Servers[dead].Addr()) && strings.Contains(line, "fail") && !strings.Contains(line, "fail?") {
							return nil
						}
					}
					return fmt.Errorf("CLUSTER NODES:\n%s", nodes)
				})
				obs.await(t, "with a master failed")
				select {
				case <-lease(bystander).Lost():
					t.Errorf("a hold on a live master: Lost() closed; want it kept")
				default:
				}
				if err := bystander.Unlock(); err != nil {
					t.Errorf("Unlock() of the hold on a live master = %v", err)
				}
			}

			if err := c.Servers[dead].Restart(); err != nil {
				t.Fatal(err)
			}
			pollFor(t, 20*time.Second, "cluster_state:ok after the restart", clusterState(survivor))
			pollFor(t, 10*time.Second, "the lock free after the restart", func(context.Context) error {
				ok, err := contender.TryLock()
				if !ok && err == nil {
					return errors.New("contended")
				}
				return err
			})
			// Fencing: the counter died with the node; the acquire script
			// floors a new one at the clock in milliseconds.
			if got, old := lease(contender).Token(), lostToken; got <= old {
				t.Errorf("token after the restart %d <= lost token %d", got, old)
			}
			if err := contender.Unlock(); err != nil {
				t.Errorf("contender Unlock() = %v", err)
			}
		})
	}
}

// A master with a replica dies (SIGKILL) and the replica takes over, as
// with Sentinel (TestSentinelFailover). Holds the replica had not received
// (the async replication window, forced by freezing the replica) are
// reported lost, and the next owner's token is higher. Holds it had are
// kept: the holder's client learns the new master within the TTL, with a
// ClusterStateReloadInterval of 1s as with go-redis's default of 60s,
// since the engine has it reload its slot map when renewals to the dead
// master fail. A contender trying all along never gets a lock whose holder
// has not been told it lost it. Nothing loads the scripts on the new
// master before it takes over.
func TestClusterFailover(t *testing.T) {
	for _, tc := range []struct {
		name   string
		reload time.Duration // the holder's ClusterStateReloadInterval; 0 for go-redis's default
	}{
		{"reload=1s", time.Second},
		{"reload=default", 0},
	} {
		t.Run(tc.name, func(t *testing.T) { testClusterFailover(t, tc.reload) })
	}
}

func testClusterFailover(t *testing.T, reload time.Duration) {
	c := testserver.RedisCluster(t, 3, testserver.WithReplicas(1))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	fastReload := func(o *goredis.ClusterOptions) { o.ClusterStateReloadInterval = time.Second }
	cc := clusterClient(t, c, func(o *goredis.ClusterOptions) { o.ClusterStateReloadInterval = reload })
	obs := newRenewals()
	holders := newEngine(t, cc, redis.WithPrefix("failover"), redis.WithLogger(quietLog), redis.WithObserver(obs))
	defer holders.Close()
	contenders := newEngine(t, clusterClient(t, c, fastReload), redis.WithPrefix("failover"), redis.WithName("contender"), redis.WithLogger(quietLog))
	defer contenders.Close()

	// A TTL longer than the failover, so replicated holds can survive it.
	const ttl = 6 * time.Second
	hold := func(name string) locker.Locker { return holdOrFail(t, holders, name, ttl) }
	replicated := hold("replicated")
	token := lease(replicated).Token()
	obs.await(t, "before the failover")
	m := masterOf(ctx, t, c, cc, holders.LockKey("replicated"))
	master, replica := c.Servers[m], c.Servers[3+m]
	// READONLY lets a replica answer reads of its own slots.
	readReplica := goredis.NewClient(&goredis.Options{Addr: replica.Addr(),
		OnConnect: func(ctx context.Context, cn *goredis.Conn) error { return cn.ReadOnly(ctx).Err() }})
	defer readReplica.Close()
	pollFor(t, 5*time.Second, "the replica has the hold", func(ctx context.Context) error {
		return readReplica.Get(ctx, holders.LockKey("replicated")).Err()
	})

	// Frozen and cut off, the replica misses what the master grants next.
	if err := replica.Pause(); err != nil {
		t.Fatal(err)
	}
	if err := nodeClient(t, master.Addr()).Do(ctx, "CLIENT", "KILL", "TYPE", "replica").Err(); err != nil {
		t.Fatalf("CLIENT KILL TYPE replica: %v", err)
	}
	var name string // a name on the same master
	for i := 0; name == ""; i++ {
		if n := fmt.Sprintf("unreplicated/%d", i); masterOf(ctx, t, c, cc, holders.LockKey(n)) == m {
			name = n
		}
	}
	unreplicated := hold(name)
	lostToken := lease(unreplicated).Token()

	// The contender tries the replicated name throughout, and lets go of
	// it at once.
	stop, tried := make(chan struct{}), make(chan []string, 1)
	go func() {
		var dup []string
		l, _ := contenders.NewLocker("replicated")
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				tried <- dup
				return
			case <-tick.C:
			}
			if ok, _ := l.TryLock(); ok {
				select {
				case <-lease(replicated).Lost():
				default:
					dup = append(dup, fmt.Sprintf("token %d at %v", lease(l).Token(), time.Now().Format(time.StampMilli)))
				}
				_ = l.Unlock()
			}
		}
	}()
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
			<-tried
		}
	}()

	if err := master.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := replica.Resume(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	pollFor(t, 20*time.Second, "the replica takes over", func(ctx context.Context) error {
		info, err := readReplica.Info(ctx, "replication").Result()
		if err != nil {
			return err
		}
		if !strings.Contains(info, "role:master") {
			return errors.New("still a replica")
		}
		return nil
	})
	t.Logf("failover took %v", time.Since(killed))

	// The hold the new master never saw is reported lost within the TTL.
	select {
	case <-lease(unreplicated).Lost():
	case <-time.After(ttl + 5*time.Second):
		t.Fatalf("%s: Lost() not closed after the failover", name)
	}
	// Renewed on the new master, and still its holder's.
	obs.await(t, "after the failover")
	select {
	case <-lease(replicated).Lost():
		t.Fatalf("replicated: Lost() closed; want the hold kept")
	default:
	}
	if in, err := contenders.Inspect(ctx, "replicated"); err != nil || in.Holder == nil || in.Holder.Token != token {
		t.Errorf("Inspect() = %+v, %v; want the hold with token %d", in, err, token)
	}
	close(stop)
	if dup := <-tried; len(dup) > 0 {
		t.Errorf("the contender got the replicated lock while its holder still had it: %v", dup)
	}
	if err := replicated.Unlock(); err != nil {
		t.Errorf("replicated: Unlock() = %v", err)
	}

	c2, _ := contenders.NewLocker(name)
	if ok, err := c2.TryLock(); !ok || err != nil {
		t.Fatalf("%s: contender TryLock() = %v, %v; want true, nil", name, ok, err)
	}
	// Fencing: the new owner's token is higher than the lost one's,
	// although the counter the old master bumped was lost too.
	if got := lease(c2).Token(); got <= lostToken {
		t.Errorf("%s: token after the failover %d <= lost token %d", name, got, lostToken)
	}
	if err := unreplicated.Unlock(); !errors.Is(err, locker.ErrLockLost) {
		t.Errorf("%s: Unlock() of the lost hold = %v; want ErrLockLost", name, err)
	}
	if err := c2.Unlock(); err != nil {
		t.Errorf("%s: contender Unlock() = %v", name, err)
	}
}
