package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/orthrus-go/orthrus/internal/testserver"
	"github.com/orthrus-go/orthrus/locker"
)

// The lock family across processes: each process runs read-write locks
// (one acquisition in five a write) and a semaphore of familyPermits
// (acquisitions of 1 or 2 permits) on each engine, and counts in a Redis of
// its own who is inside while it holds.
const (
	familyProcs      = 4
	familyOpsPerProc = 250 // per engine and kind
	familyPermits    = 3
)

const familyWorkerEnv = "E2E_FAMILY_WORKER"

// familyServers is what a worker process needs: the engines' servers and
// the counting Redis.
type familyServers struct {
	Redis, Etcd, ZK, Count string
}

var familyResult = regexp.MustCompile(`family-worker engine=(\S+) kind=(\S+) ops=(\d+) violations=(\d+)`)

func TestFamilyAcrossProcesses(t *testing.T) {
	if env := os.Getenv(familyWorkerEnv); env != "" {
		familyWorker(t, env)
		return
	}
	srv := familyServers{
		Redis: testserver.Redis(t).Addr(), Etcd: testserver.Etcd(t).Addr(),
		ZK: testserver.ZooKeeper(t).Addr(), Count: testserver.Redis(t).Addr(),
	}
	env, _ := json.Marshal(srv)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	outs := make([][]byte, familyProcs)
	errs := make([]error, familyProcs)
	var wg sync.WaitGroup
	for i := range familyProcs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestFamilyAcrossProcesses$", "-test.count=1")
			cmd.Env = append(os.Environ(), familyWorkerEnv+"="+string(env))
			outs[i], errs[i] = cmd.CombinedOutput()
		}()
	}
	wg.Wait()
	ops := map[string]int{}
	for i := range familyProcs {
		ms := familyResult.FindAllSubmatch(outs[i], -1)
		if errs[i] != nil || len(ms) != 6 {
			t.Fatalf("process %d: %v\n%s", i, errs[i], outs[i])
		}
		for _, m := range ms {
			n, _ := strconv.Atoi(string(m[3]))
			v, _ := strconv.Atoi(string(m[4]))
			ops[string(m[1])+" "+string(m[2])] += n
			if v != 0 {
				t.Errorf("process %d, %s %s: %d violations; want 0", i, m[1], m[2], v)
			}
		}
	}
	t.Logf("acquisitions in %d processes: %v", familyProcs, ops)
}

// familyWorker runs in a re-executed test binary.
func familyWorker(t *testing.T, env string) {
	var srv familyServers
	if err := json.Unmarshal([]byte(env), &srv); err != nil {
		t.Fatal(err)
	}
	count := goredis.NewClient(&goredis.Options{Addr: srv.Count})
	defer count.Close()
	for _, e := range []locker.Engine{
		redisEngine(t, "redis", srv.Redis), etcdEngine(t, "etcd", srv.Etcd), zkEngine(t, "zk", srv.ZK),
	} {
		w := familyCounter{t: t, c: count, engine: e.Name()}
		w.rw(e)
		w.semaphore(e)
		if err := e.Close(); err != nil {
			t.Errorf("Close() = %v", err)
		}
	}
}

// familyCounter counts holders in Redis, one key per engine and role.
type familyCounter struct {
	t      *testing.T
	c      *goredis.Client
	engine string
}

// enter adds n to the role's count and returns the counts of roles after it.
var enter = goredis.NewScript(`
local v = redis.call('INCRBY', KEYS[1], ARGV[1])
local out = {v}
for i = 2, #KEYS do out[i] = tonumber(redis.call('GET', KEYS[i]) or '0') end
return out`)

func (w familyCounter) key(role string) string { return "e2e-family:" + w.engine + ":" + role }

// inside adds n to role's count and returns the new count with the
// counts of others.
func (w familyCounter) inside(role string, n int, others ...string) []int64 {
	keys := []string{w.key(role)}
	for _, o := range others {
		keys = append(keys, w.key(o))
	}
	vs, err := enter.Run(context.Background(), w.c, keys, n).Int64Slice()
	if err != nil {
		w.t.Fatal(err)
	}
	return vs
}

func (w familyCounter) leave(role string, n int) {
	if err := w.c.DecrBy(context.Background(), w.key(role), int64(n)).Err(); err != nil {
		w.t.Fatal(err)
	}
}

func (w familyCounter) rw(e locker.Engine) {
	l, err := e.NewRWLock("e2e-family/rw")
	if err != nil {
		w.t.Fatal(err)
	}
	violations := 0
	for range familyOpsPerProc {
		write := rand.IntN(5) == 0
		side, role, other := l.ReadLock(), "readers", "writers"
		if write {
			side, role, other = l.WriteLock(), "writers", "readers"
		}
		w.lock(side)
		vs := w.inside(role, 1, other)
		if write && (vs[0] != 1 || vs[1] != 0) || !write && vs[1] != 0 {
			violations++
		}
		w.leave(role, 1)
		if err := side.Unlock(); err != nil {
			w.t.Fatalf("Unlock() = %v", err)
		}
	}
	fmt.Printf("family-worker engine=%s kind=rw ops=%d violations=%d\n", w.engine, familyOpsPerProc, violations)
}

func (w familyCounter) semaphore(e locker.Engine) {
	s, err := e.NewSemaphore("e2e-family/sem", familyPermits)
	if err != nil {
		w.t.Fatal(err)
	}
	violations := 0
	for range familyOpsPerProc {
		n := 1 + rand.IntN(2)
		p, err := s.NewPermit(n)
		if err != nil {
			w.t.Fatal(err)
		}
		w.lock(p)
		if vs := w.inside("permits", n); vs[0] > familyPermits {
			violations++
		}
		w.leave("permits", n)
		if err := p.Unlock(); err != nil {
			w.t.Fatalf("Unlock() = %v", err)
		}
	}
	fmt.Printf("family-worker engine=%s kind=semaphore ops=%d violations=%d\n", w.engine, familyOpsPerProc, violations)
}

func (w familyCounter) lock(l locker.Locker) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := l.LockCtx(ctx); err != nil {
		w.t.Fatalf("%s: LockCtx() = %v", w.engine, err)
	}
}
