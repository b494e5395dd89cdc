package e2e

import (
	"context"
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

	"github.com/orthrus-go/orthrus/engines/redis"
	"github.com/orthrus-go/orthrus/internal/testserver"
	"github.com/orthrus-go/orthrus/locker"
)

// Multi-lock across processes: each process takes random sets of two or
// three names out of five, listed in random order, and counts in Redis
// how many holders each name has while it holds the set.
const (
	multiProcs      = 4
	multiOpsPerProc = 2500
	multiPool       = 5
)

// multiWorkerEnv carries the Redis address to a re-executed test binary,
// which then runs one worker instead of the test.
const multiWorkerEnv = "E2E_MULTI_WORKER"

var multiResult = regexp.MustCompile(`multi-worker ops=(\d+) overlaps=(\d+)`)

func TestMultiLockAcrossProcesses(t *testing.T) {
	if addr := os.Getenv(multiWorkerEnv); addr != "" {
		multiWorker(t, addr)
		return
	}
	srv := testserver.Redis(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	outs := make([][]byte, multiProcs)
	errs := make([]error, multiProcs)
	var wg sync.WaitGroup
	for i := range multiProcs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestMultiLockAcrossProcesses$", "-test.count=1")
			cmd.Env = append(os.Environ(), multiWorkerEnv+"="+srv.Addr())
			outs[i], errs[i] = cmd.CombinedOutput()
		}()
	}
	wg.Wait()
	var ops, overlaps int
	for i := range multiProcs {
		m := multiResult.FindSubmatch(outs[i])
		if errs[i] != nil || m == nil {
			t.Fatalf("process %d: %v\n%s", i, errs[i], outs[i])
		}
		n, _ := strconv.Atoi(string(m[1]))
		o, _ := strconv.Atoi(string(m[2]))
		ops, overlaps = ops+n, overlaps+o
	}
	t.Logf("%d multi-lock operations in %d processes, %d overlaps", ops, multiProcs, overlaps)
	if ops < 10000 {
		t.Errorf("%d operations; want at least 10,000", ops)
	}
	if overlaps != 0 {
		t.Errorf("%d overlapping holds of one name; want 0", overlaps)
	}
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer c.Close()
	for i := range multiPool {
		if n, err := c.Get(context.Background(), insideKey(i)).Int(); err != nil || n != 0 {
			t.Errorf("holders of name %d at the end = %d, %v; want 0", i, n, err)
		}
	}
}

func insideKey(i int) string { return fmt.Sprintf("e2e-multi:inside:%d", i) }

// multiWorker runs in a re-executed test binary.
func multiWorker(t *testing.T, addr string) {
	c := goredis.NewClient(&goredis.Options{Addr: addr})
	defer c.Close()
	e, err := redis.New(c, redis.WithPrefix("e2e-multi"))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx := context.Background()
	overlaps := 0
	for range multiOpsPerProc {
		picked := rand.Perm(multiPool)[:2+rand.IntN(2)]
		parts := make([]locker.Handle, len(picked))
		for j, p := range picked {
			if parts[j], err = e.NewLocker(fmt.Sprintf("name-%d", p)); err != nil {
				t.Fatal(err)
			}
		}
		m, err := locker.NewMultiLock(parts...)
		if err != nil {
			t.Fatal(err)
		}
		lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err = m.LockCtx(lctx)
		cancel()
		if err != nil {
			t.Fatalf("LockCtx() = %v (deadlock?)", err)
		}
		in := make([]*goredis.IntCmd, len(picked))
		if _, err := c.Pipelined(ctx, func(p goredis.Pipeliner) error {
			for j, n := range picked {
				in[j] = p.Incr(ctx, insideKey(n))
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		for _, cmd := range in {
			if cmd.Val() != 1 {
				overlaps++
			}
		}
		if _, err := c.Pipelined(ctx, func(p goredis.Pipeliner) error {
			for _, n := range picked {
				p.Decr(ctx, insideKey(n))
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if err := m.Unlock(); err != nil {
			t.Fatalf("Unlock() = %v", err)
		}
	}
	fmt.Printf("multi-worker ops=%d overlaps=%d\n", multiOpsPerProc, overlaps)
}
