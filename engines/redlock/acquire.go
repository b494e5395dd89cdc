package redlock

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/orthrus-go/orthrus/engines/redis"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/driver"
)

//go:embed lua/*.lua
var luaFiles embed.FS

// script joins the single-node engine's Lua fragments named by shared and
// this package's file own ("" for none) into one script.
func script(own string, shared ...string) *goredis.Script {
	src := redis.Lua(shared...)
	if own != "" {
		b, err := luaFiles.ReadFile("lua/" + own + ".lua")
		if err != nil {
			panic(err) // a name not embedded: no test would pass
		}
		src += string(b)
	}
	return goredis.NewScript(src)
}

// The per-node scripts: phase 1 is the single-node engine's acquire
// script as it is (its token is the node's counter, floored at the node's
// clock); the others are this package's, over the same fragments.
var (
	acquireScript   = script("", "fence", "acquire")
	writeBackScript = script("writeback", "clock")
	releaseScript   = script("release", "unlock")
	renewScript     = script("renew")
	forceScript     = script("", "unlock", "force")
	inspectScript   = script("", "clock", "inspect")
)

// hold is the engine's state of one acquisition.
type hold struct {
	keys    []string // the lock's key and its counter's
	channel string   // the release channel
	// toks[i] is the token node i drew in phase 1 when it granted, 0 where
	// it did not: its hold reads "<toks[i]>:<owner>", or "<token>:<owner>"
	// once phase 2 relabelled it. Written by the attempts, read only once
	// granted.
	toks  []uint64
	token uint64 // the grant's
}

func (e *Engine) newHold(h *driver.Hold) *hold {
	lock := e.LockKey(h.Name)
	return &hold{keys: []string{lock, lock + fenceSuffix}, channel: lock + channelSuffix, toks: make([]uint64, len(e.nodes))}
}

// Acquire implements driver.Backend: an attempt on every node at once,
// then, while the name is held and wait is true, a wait for this
// process's turn after a release message from any node (or the soonest
// expiry the nodes reported) and another attempt; after a split, a random
// backoff instead.
func (e *Engine) Acquire(ctx context.Context, h *driver.Hold, wait bool) (bool, error) {
	st := e.newHold(h)
	h.State = st
	var w *waiter
	granted := false
	defer func() {
		if w != nil {
			e.hub.leave(w, granted)
		}
	}()
	var silent time.Time // when the first of a run of attempts a majority did not answer began
	splits := 0          // the attempts in a row that split the nodes
	for {
		began := time.Now()
		r := e.attempt(ctx, h, st, silent.IsZero())
		if r.err != nil && r.silent && silent.IsZero() {
			silent = began
		}
		switch {
		case r.err != nil && r.silent && ctx.Err() == nil:
			if !e.retrySilent(ctx, silent, r.took) {
				return false, r.err
			}
			continue // a majority may yet answer within the caller's budget
		case r.err != nil:
			return false, r.err
		case r.granted:
			granted = true
			return true, nil
		case !wait:
			return false, nil
		}
		if w == nil {
			var err error
			if w, err = e.hub.join(ctx, h.Name, st.channel); err != nil {
				return false, err
			}
			continue // a release before the subscription published to no one
		}
		var err error
		if r.split {
			splits++
			err = pause(ctx, e.backoff(r, splits))
		} else {
			splits = 0
			err = w.await(ctx, r.soonest)
		}
		if err != nil {
			return false, err
		}
		silent = time.Time{}
	}
}

// requestTimeout bounds how long an acquisition goes on trying while a
// majority of the nodes does not answer (rather than refusing, which ends
// it at once): long enough that a caller's wait shorter than
// driver.OutageAfter only runs out of time, as on a held name, and that
// TryLock on a frozen majority fails within the single-node engine's
// request timeout.
const requestTimeout = driver.DefaultRequestTimeout

// retrySilent pauses before another attempt while a majority is silent
// (the rest of a node timeout after one that took took, so that nodes
// failing at once are not asked in a busy loop) and reports true, or
// reports false when that attempt could not end within requestTimeout of
// since, the first silent attempt's start: the bound is the whole run's,
// however late a loaded host wakes each step of it.
func (e *Engine) retrySilent(ctx context.Context, since time.Time, took time.Duration) bool {
	p := max(e.timeout-took, time.Millisecond)
	if time.Since(since)+p+e.timeout > requestTimeout {
		return false
	}
	return pause(ctx, p) == nil
}

// pause waits d, or until ctx is done.
func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// outcome is what one attempt found.
type outcome struct {
	granted bool
	err     error
	// soonest is the least time a hold that refused the attempt had left.
	soonest time.Duration
	// split: the attempt got some nodes (got) but not a majority, as may
	// every contender of a race; they all let go and try again, apart.
	split bool
	got   int
	// silent: err says that fewer than a majority answered, and not
	// because they refused the connection (nodes down).
	silent bool
	took   time.Duration
}

// attempt is one acquisition: phase 1 on every node; with a majority, the
// token (the majority's highest counter) written back to a majority in
// phase 2, and the validity checked. A failed attempt lets go of the
// nodes it got.
//
// asking says that the previous attempt got its answers: the Core then
// dates the request from this one (see driver.Hold.Asking).
func (e *Engine) attempt(ctx context.Context, h *driver.Hold, st *hold, asking bool) outcome {
	if asking {
		h.Asking()
	}
	start := time.Now()
	life := h.Life().Milliseconds()
	answers := fanOut(ctx, e, e.all, func(ctx context.Context, i int) (int64, error) {
		return acquireScript.Run(ctx, e.nodes[i], st.keys, h.Owner, life, e.idle).Int64()
	}, func(ctx context.Context, i int, tok int64) {
		if tok > 0 { // granted after the attempt was decided without it
			e.releaseOn(ctx, i, st, h.Owner, uint64(tok), uint64(tok))
		}
	})
	clear(st.toks)
	granted, top, soonest := 0, uint64(0), h.TTL
	ok, errs := tally(answers)
	for _, a := range answers {
		switch {
		case a.err != nil:
		case a.val > 0:
			st.toks[a.node] = uint64(a.val)
			granted++
			top = max(top, uint64(a.val))
		default:
			soonest = min(soonest, time.Duration(-a.val)*time.Millisecond)
		}
	}
	if granted >= e.quorum && e.writeBack(ctx, h, st, top) && validity(h.TTL, time.Since(start)) > 0 {
		st.token, h.Token = top, top
		return outcome{granted: true}
	}
	if granted > 0 {
		e.letGo(ctx, h, st)
	}
	if ok < e.quorum || (len(answers) < len(e.nodes) && ctx.Err() != nil) {
		err := e.unavailable(ctx, "acquire", h.Name, ok, errs)
		return outcome{err: err, silent: !errors.Is(err, locker.ErrRefused), took: time.Since(start)}
	}
	return outcome{soonest: soonest, split: granted > 0, got: granted, took: time.Since(start)}
}

// validity is how long a grant that took elapsed is safe to rely on: the
// TTL less the time taken and the allowance for the nodes' clocks running
// at different rates (1% of the TTL, and 2ms for the resolution of Redis's
// expiry).
func validity(ttl, elapsed time.Duration) time.Duration {
	return ttl - elapsed - (ttl/100 + 2*time.Millisecond)
}

// writeBack is phase 2: it makes the counter at least token on a majority,
// so that every later majority, which shares a node with it, draws a
// higher one. The nodes that drew token in phase 1 have it already; the
// others that granted are raised. It reports whether a majority has it.
func (e *Engine) writeBack(ctx context.Context, h *driver.Hold, st *hold, token uint64) bool {
	have := 0
	var lag []int
	for i, t := range st.toks {
		switch {
		case t == token:
			have++
		case t != 0:
			lag = append(lag, i)
		}
	}
	if have >= e.quorum {
		return true
	}
	answers := fanOut(ctx, e, lag, func(ctx context.Context, i int) (int64, error) {
		return writeBackScript.Run(ctx, e.nodes[i], st.keys, h.Owner, st.toks[i], token, e.idle).Int64()
	}, nil)
	ok, _ := tally(answers)
	return have+ok >= e.quorum
}

// letGo releases what a failed attempt got, before the next attempt (which
// would find its own hold in the way), or in the background when the
// caller has gone.
func (e *Engine) letGo(ctx context.Context, h *driver.Hold, st *hold) {
	toks, owner := append([]uint64(nil), st.toks...), h.Owner
	release := func(ctx context.Context) {
		fanOut(ctx, e, e.all, func(ctx context.Context, i int) (struct{}, error) {
			if toks[i] == 0 {
				return struct{}{}, nil
			}
			return struct{}{}, e.releaseOn(ctx, i, st, owner, toks[i], toks[i])
		}, nil)
	}
	if ctx.Err() == nil {
		release(context.Background())
	} else if !e.work.Go(release) {
		e.log.Warn("redlock: closing: a failed attempt's nodes end at its TTL", "name", h.Name)
	}
}

// releaseOn deletes the hold of owner on node i, read as "<token>:<owner>"
// or "<tok>:<owner>", and publishes a release there. It returns
// errGone when the node no longer has it.
func (e *Engine) releaseOn(ctx context.Context, i int, st *hold, owner string, token, tok uint64) error {
	n, err := releaseScript.Run(ctx, e.nodes[i], st.keys[:1], owner, token, tok, "numsub", "publish").Int64()
	if err == nil && n == 0 {
		return errGone
	}
	return err
}

// errGone is a node's answer that a hold is not there.
var errGone = fmt.Errorf("not held on this node: %w", locker.ErrLockLost)

// backoff is the pause before the next attempt after the n-th split in a
// row: random within a window that starts at twice the attempt's own
// duration (what an attempt takes on this host, loaded or not) and doubles
// with each split up to maxSplitWindow, as Raft spreads its candidates'
// elections, so that contenders who split the nodes soon try one at a
// time. An attempt one node short of a majority draws from the window's
// first half and the others from its second: the nearest to winning tries
// first.
func (e *Engine) backoff(r outcome, n int) time.Duration {
	window := min(max(r.took, time.Millisecond)<<min(n, maxSplitDoublings), e.maxSplitWindow())
	half := window / 2
	d := rand.N(half + 1)
	if r.got < e.quorum-1 {
		d += half
	}
	return time.Millisecond + d
}

// maxSplitDoublings bounds the shift of backoff's window.
const maxSplitDoublings = 8

// maxSplitWindow bounds backoff's window: a few node timeouts, the longest
// an attempt's round trip can take, so that a run of splits costs a wait of
// a few attempts, short against any TTL.
func (e *Engine) maxSplitWindow() time.Duration { return 4 * e.timeout }
