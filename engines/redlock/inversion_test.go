package redlock_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/engines/redlock"
	"github.com/orthrus-go/orthrus/internal/testserver"
	"github.com/orthrus-go/orthrus/locker"
)

// inversionSeedEnv replays a seed of TestNoTokenInversion.
const inversionSeedEnv = "REDLOCK_INVERSION_SEED"

// Tokens never go backwards over many grants of one name by two engines
// (two processes) taking turns, while nodes are killed and restarted, some
// with their data (an append-only file synced at every write) and some
// without (their counters start again from their clocks), in a seeded
// random order, with at most two of five down at once.
func TestNoTokenInversion(t *testing.T) {
	grants := 10_000
	if testing.Short() {
		grants = 2_000
	}
	seed := uint64(time.Now().UnixNano())
	if s, err := strconv.ParseUint(os.Getenv(inversionSeedEnv), 10, 64); err == nil {
		seed = s
	}
	t.Logf("seed %d (%s=%d replays it)", seed, inversionSeedEnv, seed)
	rng := rand.New(rand.NewPCG(seed, seed))
	ss := make([]*testserver.Server, nodeCount)
	for i := range ss {
		ss[i] = testserver.Redis(t, testserver.WithArgs("--appendonly", "yes", "--appendfsync", "always"))
	}
	var ls [2]locker.Handle
	for i := range ls {
		e := newEngine(t, clients(t, addrsOf(ss)), redlock.WithLogger(quietLog))
		t.Cleanup(func() { _ = e.Close() })
		ls[i], _ = e.NewLocker("inversion", locker.WithTTL(inversionTTL))
	}
	down := map[int]bool{}
	var last uint64
	restarts := [3]int{} // kills, restarts with data, without
	for g := 0; g < grants; g++ {
		if g%100 == 99 {
			restarts[fault(t, rng, ss, down)]++
		}
		l := ls[rng.IntN(len(ls))]
		lockRetrying(t, l, g)
		if tok := l.Token(); tok <= last {
			t.Fatalf("grant %d: token %d after %d: an inversion", g, tok, last)
		} else {
			last = tok
		}
		if err := l.Unlock(); err != nil {
			t.Logf("grant %d: Unlock() = %v", g, err)
		}
	}
	t.Logf("%d grants, %d kills, %d restarts with data, %d without", grants, restarts[0], restarts[1], restarts[2])
}

// fault kills a node that is up (while fewer than two are down), or
// restarts one that is down, with its data or without; it returns what it
// did: 0 a kill (or nothing), 1 a restart with data, 2 one without.
func fault(t *testing.T, rng *rand.Rand, ss []*testserver.Server, down map[int]bool) int {
	t.Helper()
	i := rng.IntN(len(ss))
	if !down[i] {
		if len(down) < 2 {
			if err := ss[i].Kill(); err != nil {
				t.Fatal(err)
			}
			down[i] = true
		}
		return 0
	}
	did := 1
	if rng.IntN(2) == 0 {
		wipe(t, ss[i].Dir())
		did = 2
	}
	if err := ss[i].Restart(); err != nil {
		t.Fatal(err)
	}
	delete(down, i)
	return did
}

// wipe deletes a stopped server's data.
func wipe(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
}

// inversionTTL is short against lockRetrying's 10s: a node killed while
// a release's request to it was still out, and restarted with its data,
// keeps that hold until its TTL, and two such copies among the nodes up
// leave no majority to anyone until then (with the default 30s, a run
// under load failed "LockCtx() = context deadline exceeded").
const inversionTTL = 2 * time.Second

// lockRetrying locks l, trying again while the engine is unavailable: a
// node restarted a moment ago may not be dialled yet (go-redis probes a
// server whose dials failed once a second), with another one down.
func lockRetrying(t *testing.T, l locker.Handle, g int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := l.LockCtx(ctx)
		cancel()
		switch {
		case err == nil:
			return
		case !errors.Is(err, locker.ErrUnavailable) || time.Now().After(deadline):
			t.Fatalf("grant %d: LockCtx() = %v", g, err)
		}
		time.Sleep(50 * time.Millisecond) // the client's reconnection, not a goroutine, is awaited
	}
}
