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
)

// InspectFamily reports the holds of the read-write lock (kind KindRead or
// KindWrite) or the semaphore (KindPermit) named name, oldest grant first.
// The waiters are the writers waiting to write, by ticket (Token is the
// ticket): Redis does not queue waiting readers or permit waiters.
func (e *Engine) InspectFamily(ctx context.Context, kind locker.Kind, name string) (locker.FamilyInspection, error) {
	if err := e.checkOperation(name); err != nil {
		return locker.FamilyInspection{}, err
	}
	if kind != locker.KindRead && kind != locker.KindWrite && kind != locker.KindPermit {
		return locker.FamilyInspection{}, fmt.Errorf("redis: inspect %q: %w: kind %v, want read, write or permit", name, locker.ErrInvalidArgument, kind)
	}
	k := e.famKeys(kind, name)
	// The script reads a string and two sorted sets: the writer, the
	// readers and the waiting writers, or the count and the holds (twice).
	keys := []string{k[0], k[1], k[2]}
	if kind == locker.KindPermit {
		keys = []string{k[1], k[0], k[0]}
	}
	r, err := e.inspectKeys(ctx, name, keys)
	if err != nil {
		return locker.FamilyInspection{}, err
	}
	now, str := r.now, r.str
	var in locker.FamilyInspection
	if kind == locker.KindPermit {
		in.Permits, _ = strconv.Atoi(str)
		in.Holders = entries(r.sets[0], now, locker.KindPermit)
	} else {
		in.Holders = entries(r.sets[0], now, locker.KindRead)
		if str != "" {
			w := locker.FamilyHolder{Holder: parseHolder(str), Kind: locker.KindWrite, Permits: 1}
			w.TTL = r.ttl
			in.Holders = append(in.Holders, w)
		}
		in.Waiters = entries(r.sets[1], now, locker.KindWrite)
	}
	for _, hs := range [][]locker.FamilyHolder{in.Holders, in.Waiters} {
		slices.SortStableFunc(hs, func(a, b locker.FamilyHolder) int { return cmp.Compare(a.Token, b.Token) })
	}
	return in, nil
}

// inspected is what familyInspectScript read: the server time (ms), a
// string's value ("" when absent) and time left, and two sorted sets with
// their scores.
type inspected struct {
	now  int64
	str  string
	ttl  time.Duration
	sets [2]any
}

// inspectKeys runs familyInspectScript on keys (a string, two sorted sets)
// for the inspection of name.
func (e *Engine) inspectKeys(ctx context.Context, name string, keys []string) (inspected, error) {
	v, err := familyInspectScript.Run(ctx, e.client, keys).Slice()
	if err != nil {
		return inspected{}, e.fail(ctx, "inspect", name, err)
	}
	if len(v) != 5 {
		return inspected{}, fmt.Errorf("redis: inspect %q: unexpected reply %v", name, v)
	}
	r := inspected{sets: [2]any{v[3], v[4]}}
	r.now, _ = v[0].(int64)
	r.str, _ = v[1].(string)
	pttl, _ := v[2].(int64)
	r.ttl = time.Duration(max(pttl, 0)) * time.Millisecond
	return r, nil
}

// entries reads the live entries of a sorted set of holds or waiters, as
// ZRANGE WITHSCORES gives them: "<token>:<owner>" (or
// "<token>:<permits>:<owner>" for permits) and the expiry in ms.
func entries(v any, now int64, kind locker.Kind) []locker.FamilyHolder {
	flat, _ := v.([]any)
	var hs []locker.FamilyHolder
	for i := 0; i+1 < len(flat); i += 2 {
		m, _ := flat[i].(string)
		s, _ := flat[i+1].(string)
		exp, _ := strconv.ParseFloat(s, 64)
		left := int64(exp) - now
		if left <= 0 {
			continue // expired, not yet pruned
		}
		h := locker.FamilyHolder{Kind: kind, Permits: 1}
		if kind == locker.KindPermit {
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
	k := e.famKeys(locker.KindPermit, name)
	if err := semSetScript.Run(ctx, e.client, k[:2], n, e.numsub, e.publish).Err(); err != nil {
		return e.fail(ctx, "set permits", name, err)
	}
	return nil
}
