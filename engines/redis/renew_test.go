package redis_test

import (
	"context"
	"errors"
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
)

// Holds of every kind that fall due together are renewed by one script
// call (on Cluster, one per name, in one pipeline), and each gets its own
// answer: the holds whose entries were removed are lost, in the same calls
// as the others, which are kept.
func TestRenewMixedChunk(t *testing.T) {
	for _, tc := range []struct {
		name   string
		client func(testing.TB) goredis.UniversalClient
		// keys is the most keys a renewal call is to carry: every hold
		// in one call, or on Cluster the holds of one name.
		keys int
	}{
		{"single", func(t testing.TB) goredis.UniversalClient { return newSingle(t) }, 7},
		{"cluster", func(t testing.TB) goredis.UniversalClient { return newCluster(t) }, 2},
	} {
		t.Run(tc.name, func(t *testing.T) { testRenewMixedChunk(t, tc.client(t), tc.keys) })
	}
}

func testRenewMixedChunk(t *testing.T, c goredis.UniversalClient, wantKeys int) {
	ctx := context.Background()
	calls := &renewCalls{}
	c.AddHook(calls)
	obs := newRenewals()
	e := newEngine(t, c, redis.WithPrefix("mixed"), redis.WithObserver(obs), redis.WithLogger(quietLog))
	defer e.Close()
	// Renewed every second: the seven holds, taken within a few
	// milliseconds, fall due within the scheduler's quarter interval of
	// each other and share its calls.
	opt := locker.WithTTL(3 * time.Second)
	base := strings.ReplaceAll(t.Name(), "/", "-")
	name := func(s string) string { return base + "-" + s }
	mutex := func(s string) locker.Handle {
		l, _ := e.NewLocker(name(s), opt)
		return l
	}
	rw := func(s string) locker.RWLock {
		l, _ := e.NewRWLock(name(s), opt)
		return l
	}
	sem, _ := e.NewSemaphore(name("sem"), 2, opt)
	permit := func() locker.Handle {
		p, _ := sem.NewPermit(1)
		return p
	}
	holds := map[string]locker.Handle{
		"mutex":   mutex("kept"),
		"gone":    mutex("gone"),
		"writer":  rw("w").WriteLock(),
		"reader1": rw("r").ReadLock(),
		"reader2": rw("r").ReadLock(),
		"permit1": permit(),
		"permit2": permit(),
	}
	for _, h := range holds {
		lockNow(t, h)
	}
	renewed := func(h locker.Handle) int { return obs.count(h.Name(), h.Token()) }
	await(t, "every hold renewed", func() bool {
		for _, h := range holds {
			if renewed(h) == 0 {
				return false
			}
		}
		return true
	})

	// Take away a mutex, a reader's entry and a permit's, beside their
	// peers of the same name.
	if err := c.Del(ctx, e.LockKey(name("gone"))).Err(); err != nil {
		t.Fatal(err)
	}
	zremHold(ctx, t, c, e.FamilyKeys(inspect.KindRead, name("r"))[1], holds["reader2"].Token())
	zremHold(ctx, t, c, e.FamilyKeys(inspect.KindPermit, name("sem"))[0], holds["permit2"].Token())
	for _, k := range []string{"gone", "reader2", "permit2"} {
		select {
		case <-holds[k].Lost():
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: Lost() not closed after its entry was removed", k)
		}
		if err := holds[k].Unlock(); !errors.Is(err, locker.ErrLockLost) {
			t.Errorf("%s: Unlock() = %v; want ErrLockLost", k, err)
		}
	}
	// The others are renewed twice more, and still held.
	kept := []string{"mutex", "writer", "reader1", "permit1"}
	since := map[string]int{}
	for _, k := range kept {
		since[k] = renewed(holds[k])
	}
	await(t, "the other holds renewed twice more", func() bool {
		for _, k := range kept {
			if renewed(holds[k]) < since[k]+2 {
				return false
			}
		}
		return true
	})
	for _, k := range kept {
		select {
		case <-holds[k].Lost():
			t.Errorf("%s: Lost() closed; want the hold kept", k)
		default:
		}
		if err := holds[k].Unlock(); err != nil {
			t.Errorf("%s: Unlock() = %v", k, err)
		}
	}
	if got := calls.most(); got != wantKeys {
		t.Errorf("the most keys in one renewal call = %d; want %d", got, wantKeys)
	}
}

// zremHold removes from the sorted set key the entry of the hold with
// token.
func zremHold(ctx context.Context, t *testing.T, c goredis.UniversalClient, key string, token uint64) {
	t.Helper()
	entries, err := c.ZRange(ctx, key, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	prefix := strconv.FormatUint(token, 10) + ":"
	for _, m := range entries {
		if strings.HasPrefix(m, prefix) {
			if err := c.ZRem(ctx, key, m).Err(); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatalf("no entry of token %d in %s: %q", token, key, entries)
}

// renewCalls records the most keys a renewal call (EVALSHA of the renew
// script) carried, in single commands and pipelines.
type renewCalls struct {
	mu   sync.Mutex
	keys int
}

func (h *renewCalls) record(cmd goredis.Cmder) {
	args := cmd.Args()
	if len(args) < 3 || argString(args[0]) != "evalsha" || argString(args[1]) != redis.RenewSHA() {
		return
	}
	n, _ := strconv.Atoi(argString(args[2]))
	h.mu.Lock()
	h.keys = max(h.keys, n)
	h.mu.Unlock()
}

// argString is a command argument given as a string or a pointer to one.
func argString(a any) string {
	switch a := a.(type) {
	case string:
		return a
	case *string:
		return *a
	}
	return ""
}

func (h *renewCalls) most() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.keys
}

func (h *renewCalls) DialHook(next goredis.DialHook) goredis.DialHook { return next }
func (h *renewCalls) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		h.record(cmd)
		return next(ctx, cmd)
	}
}
func (h *renewCalls) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		for _, cmd := range cmds {
			h.record(cmd)
		}
		return next(ctx, cmds)
	}
}

// A renewal call carries at most MaxRenew holds: longer groups are cut,
// in order, and nothing is lost or repeated.
func TestSplit(t *testing.T) {
	seq := func(from, n int) []int {
		s := make([]int, n)
		for i := range s {
			s[i] = from + i
		}
		return s
	}
	const m = redis.MaxRenew
	for _, tc := range []struct {
		in, want [][]int
	}{
		{[][]int{seq(0, 3)}, [][]int{seq(0, 3)}},
		{[][]int{seq(0, m)}, [][]int{seq(0, m)}},
		{[][]int{seq(0, 2*m+5)}, [][]int{seq(0, m), seq(m, m), seq(2*m, 5)}},
		{[][]int{seq(0, 2), seq(2, m+1), seq(m+3, 1)}, [][]int{seq(0, 2), seq(2, m), seq(m+2, 1), seq(m+3, 1)}},
	} {
		got := redis.Split(tc.in)
		if !slices.EqualFunc(got, tc.want, slices.Equal) {
			t.Errorf("Split(%d groups of %v) = %v; want %v", len(tc.in), lens(tc.in), lens(got), lens(tc.want))
		}
	}
}

func lens(groups [][]int) []int {
	n := make([]int, len(groups))
	for i, g := range groups {
		n[i] = len(g)
	}
	return n
}

// Renewal against a server that is gone (killed: every try is refused at
// once) is retried with growing pauses until the hold's deadline: a
// handful of tries per TTL, not one as soon as the last failed.
func TestRenewalBacksOffOnDeadServer(t *testing.T) {
	s := testserver.Redis(t)
	obs := newRenewals()
	e := newEngine(t, faultClient(t, s.Addr(), true), redis.WithPrefix("backoff"), redis.WithObserver(obs), redis.WithLogger(quietLog))
	defer e.Close()
	const ttl = 3 * time.Second
	l, err := e.NewLocker("backoff", locker.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Lock(); err != nil {
		t.Fatalf("Lock() = %v", err)
	}
	token := l.Token()
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Lost():
	case <-time.After(3 * ttl):
		t.Fatalf("hold not lost %v after the server was killed", 3*ttl)
	}
	n := obs.failures("backoff", token)
	t.Logf("%d failed renewals before the hold was lost (TTL %v)", n, ttl)
	if n < 2 || n > 10 {
		t.Errorf("%d failed renewals in one TTL against a dead server; want 2 to 10", n)
	}
}
