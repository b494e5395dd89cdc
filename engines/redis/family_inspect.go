package redis

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/inspect"
)

var (
	inspectScript  = newScript("clock", "inspect")
	rwForceScript  = newScript("clock", "family", "forced", "rw_force")
	semForceScript = newScript("clock", "family", "forced", "sem_force")
	semSetScript   = newScript("clock", "family", "sem_set")
)

// InspectFamily reports the holds of the read-write lock (kind KindRead or
// KindWrite) or the semaphore (KindPermit) named name, oldest grant first,
// and its waiters in order of arrival (first in line first when every
// weight is 1): the waiting readers and writers, or the permit waiters. A
// waiter's Token is its ticket (see doc.go), and its TTL the time its
// entry has left unless the waiter refreshes it.
func (e *Engine) InspectFamily(ctx context.Context, kind inspect.Kind, name string) (inspect.FamilyInspection, error) {
	if err := e.checkFamily("inspect", kind, name); err != nil {
		return inspect.FamilyInspection{}, err
	}
	k := e.famKeys(kind, name)
	// The script reads a string and sorted sets: the writer, the readers
	// and the waiting writers and readers, or the count, the holds and the
	// waiters.
	keys := []string{k[0], k[1], k[2], k[4]}
	if kind == inspect.KindPermit {
		keys = []string{k[1], k[0], k[3]}
	}
	r, err := e.inspectKeys(ctx, inspectScript, "inspect", name, keys)
	if err != nil {
		return inspect.FamilyInspection{}, err
	}
	var in inspect.FamilyInspection
	if kind == inspect.KindPermit {
		in.Permits, _ = strconv.Atoi(r.str)
		in.Holders = entries(r.set(0), r.now, inspect.KindPermit)
		in.Waiters = waiters(r.set(1), r.now, inspect.KindPermit)
	} else {
		in.Holders = r.rwHolders()
		in.Waiters = append(waiters(r.set(1), r.now, inspect.KindWrite), waiters(r.set(2), r.now, inspect.KindRead)...)
	}
	byToken(in.Holders)
	byToken(in.Waiters)
	return in, nil
}

// ForceUnlockFamily ends, whoever owns them, the holds of the read-write
// lock (kind KindRead or KindWrite: both sides) or the semaphore
// (KindPermit) named name whose token is token, or all of them when token
// is 0, and returns them, oldest grant first; ErrNotHeld when none
// matched. A downgrading owner's write and read holds share a token: both
// end. The waiters are woken as a release would wake them; the owners
// learn it at their next renewal, within TTL/3 (Lost closes, Unlock
// returns ErrLockLost). For operators clearing a stuck hold.
func (e *Engine) ForceUnlockFamily(ctx context.Context, kind inspect.Kind, name string, token uint64) ([]inspect.FamilyHolder, error) {
	if err := e.checkFamily("force unlock", kind, name); err != nil {
		return nil, err
	}
	k := e.famKeys(kind, name)
	script, keys := rwForceScript, []string{k[0], k[1], k[2], k[4]}
	if kind == inspect.KindPermit {
		script, keys = semForceScript, []string{k[0], k[1], k[3]}
	}
	r, err := e.inspectKeys(ctx, script, "force unlock", name, keys, token, e.numsub, e.publish)
	if err != nil {
		return nil, err
	}
	ended := r.rwHolders()
	if kind == inspect.KindPermit {
		ended = entries(r.set(0), r.now, inspect.KindPermit)
	}
	if len(ended) == 0 {
		return nil, fmt.Errorf("redis: force unlock %s %q: %w", kind, name, locker.ErrNotHeld)
	}
	byToken(ended)
	return ended, nil
}

// checkFamily refuses an operator call on a family name with a bad name or
// kind, or on a closed engine.
func (e *Engine) checkFamily(op string, kind inspect.Kind, name string) error {
	if err := e.checkOperation(name); err != nil {
		return err
	}
	if kind != inspect.KindRead && kind != inspect.KindWrite && kind != inspect.KindPermit {
		return fmt.Errorf("redis: %s %q: %w: kind %v, want read, write or permit", op, name, locker.ErrInvalidArgument, kind)
	}
	return nil
}

// byToken sorts holds or waiters by token (or ticket): oldest first.
func byToken(hs []inspect.FamilyHolder) {
	slices.SortStableFunc(hs, func(a, b inspect.FamilyHolder) int { return cmp.Compare(a.Token, b.Token) })
}

// inspected is what inspectScript (or a force script) read: the
// server time (ms), a string's value ("" when absent) and time left, and
// sorted sets with their scores.
type inspected struct {
	now  int64
	str  string
	ttl  time.Duration
	sets []any
}

// set is r's i-th sorted set; nil, which reads as empty, past the last.
func (r inspected) set(i int) any {
	if i < len(r.sets) {
		return r.sets[i]
	}
	return nil
}

// holder is the hold in r's string, if any.
func (r inspected) holder() *inspect.Holder {
	if r.str == "" {
		return nil
	}
	h := parseHolder(r.str)
	h.TTL = r.ttl
	return &h
}

// rwHolders are the holds of a read-write lock in r: the readers of its
// first set, and the writer in its string.
func (r inspected) rwHolders() []inspect.FamilyHolder {
	hs := entries(r.set(0), r.now, inspect.KindRead)
	if w := r.holder(); w != nil {
		hs = append(hs, inspect.FamilyHolder{Holder: *w, Kind: inspect.KindWrite, Permits: 1})
	}
	return hs
}

// inspectKeys runs script (inspectScript, or a script that answers
// as it does) on keys (a string, then sorted sets) with args, for the
// operation op on name.
func (e *Engine) inspectKeys(ctx context.Context, script *luaScript, op, name string, keys []string, args ...any) (inspected, error) {
	v, err := script.run(ctx, e.client, keys, args...).Slice()
	if err != nil {
		return inspected{}, e.fail(ctx, op, name, err)
	}
	if len(v) < 3 {
		return inspected{}, fmt.Errorf("redis: %s %q: unexpected reply %v", op, name, v)
	}
	r := inspected{sets: v[3:]}
	r.now, _ = v[0].(int64)
	r.str, _ = v[1].(string)
	pttl, _ := v[2].(int64)
	r.ttl = time.Duration(max(pttl, 0)) * time.Millisecond
	return r, nil
}

// entries reads the live entries of a sorted set of holds or waiters, as
// ZRANGE WITHSCORES gives them: "<token>:<owner>" (or
// "<token>:<permits>:<owner>" for permits) and the expiry in ms.
func entries(v any, now int64, kind inspect.Kind) []inspect.FamilyHolder {
	flat, _ := v.([]any)
	var hs []inspect.FamilyHolder
	for i := 0; i+1 < len(flat); i += 2 {
		m, _ := flat[i].(string)
		s, _ := flat[i+1].(string)
		exp, _ := strconv.ParseFloat(s, 64)
		left := int64(exp) - now
		if left <= 0 {
			continue // expired, not yet pruned
		}
		h := inspect.FamilyHolder{Kind: kind, Permits: 1}
		if kind == inspect.KindPermit {
			tok, rest, _ := strings.Cut(m, ":")
			n, owner, _ := strings.Cut(rest, ":")
			h.Permits, _ = strconv.Atoi(n)
			m = tok + ":" + owner
		}
		h.Holder = parseHolder(m)
		h.TTL = time.Duration(left) * time.Millisecond
		hs = append(hs, h)
	}
	return hs
}

// band is the span of the ranks of one weight (lua/rank.lua).
const band = 1 << 41

// waiters reads the waiters of a sorted set as entries does, each rank
// turned back into the ticket it was drawn as.
func waiters(v any, now int64, kind inspect.Kind) []inspect.FamilyHolder {
	ws := entries(v, now, kind)
	for i := range ws {
		ws[i].Token %= band
	}
	return ws
}

// SetPermits stores n as the permit count of semaphore name, without
// TTL. Later acquisitions honour it; holds already granted stay, so
// lowering the count below the permits out lets none in until enough are
// released. Waiters are told of the permits it frees.
func (e *Engine) SetPermits(ctx context.Context, name string, n int) error {
	if err := e.checkOperation(name); err != nil {
		return err
	}
	if n < 1 {
		return fmt.Errorf("redis: set permits %q: %w: n = %d, want at least 1", name, locker.ErrInvalidArgument, n)
	}
	k := e.famKeys(inspect.KindPermit, name)
	if err := semSetScript.run(ctx, e.client, []string{k[0], k[1], k[3]}, n, e.numsub, e.publish).Err(); err != nil {
		return e.fail(ctx, "set permits", name, err)
	}
	return nil
}
