package redis

import (
	"context"
	"fmt"
	"strconv"

	goredis "github.com/redis/go-redis/v9"

	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/driver"
)

// renewScript renews holds of every kind.
var renewScript = newScript("clock", "family", "renew")

// Renew implements driver.Renewer: one renewScript call renews a chunk
// of up to maxRenew holds (the scheduler's chunk). On Cluster, where a
// script's keys must share a slot (and with any client that spreads keys
// over servers), it is one call per name (a name's keys share its hash
// tag). Several calls go in one pipeline.
func (e *Engine) Renew(ctx context.Context, holds []*driver.Hold) []error {
	if len(holds) == 0 {
		return nil
	}
	var groups [][]int // the indexes in holds of each call's holds
	if e.oneNode {
		all := make([]int, len(holds))
		for i := range all {
			all[i] = i
		}
		groups = split([][]int{all})
	} else {
		groups = split(byName(holds))
	}
	cmds := make([]*goredis.IntSliceCmd, len(groups))
	if len(groups) == 1 {
		cmds[0] = evalsha(ctx, e.client, renewScript, goredis.NewIntSliceCmd, renewArgs(holds, groups[0]))
	} else {
		for i, g := range groups {
			cmds[i] = goredis.NewIntSliceCmd(ctx, renewArgs(holds, g)...)
		}
		evalshaAll(ctx, e.client, renewScript, goredis.NewIntSliceCmd, cmds)
	}
	results := make([]error, len(holds))
	for i, g := range groups {
		lost, err := cmds[i].Result()
		if err != nil {
			for _, j := range g {
				results[j] = e.fail(ctx, "renew", holds[j].Name, err)
			}
			continue
		}
		for _, n := range lost { // positions from 1
			if n >= 1 && int(n) <= len(g) {
				j := g[n-1]
				results[j] = fmt.Errorf("redis: renew %q: %w", holds[j].Name, locker.ErrLockLost)
			}
		}
	}
	return results
}

// maxRenew bounds the holds of one renewScript call. Redis runs a script
// to its end before any other command, at about 1.5µs a hold: a late chunk
// of a thousand holds goes as several calls in one pipeline, which Redis
// reads 16KB, about a call, at a time, serving other clients in between.
const maxRenew = 128

// split cuts the groups longer than maxRenew.
func split(groups [][]int) [][]int {
	out := groups[:0:0]
	for _, g := range groups {
		for len(g) > maxRenew {
			out = append(out, g[:maxRenew])
			g = g[maxRenew:]
		}
		out = append(out, g)
	}
	return out
}

// byName groups the indexes of holds by name, in order of first
// appearance.
func byName(holds []*driver.Hold) [][]int {
	at := make(map[string]int, len(holds))
	groups := make([][]int, 0, len(holds))
	for i, h := range holds {
		g, ok := at[h.Name]
		if !ok {
			g = len(groups)
			at[h.Name] = g
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], i)
	}
	return groups
}

// renewArgs are the arguments of renewScript for the holds at the indexes
// g: pointers to each hold's fields, so that building them boxes nothing.
func renewArgs(holds []*driver.Hold, g []int) []any {
	args := make([]any, 3, 3+4*len(g))
	args[0], args[1], args[2] = "evalsha", &renewScript.sha, strconv.Itoa(len(g))
	for _, j := range g {
		key, _ := holds[j].State.(state).renewal()
		args = append(args, key)
	}
	for _, j := range g {
		st := holds[j].State.(state)
		_, kind := st.renewal()
		b := st.base()
		if b.value == "" {
			// A mutex's, made by its first renewal so that a short hold
			// never makes it. Only this hold's renewals read it, one at a
			// time.
			b.value = member(b.token, 0, b.owner)
		}
		args = append(args, kind, &b.value, &b.ttl)
	}
	return args
}
