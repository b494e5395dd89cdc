package redlock

import (
	"context"
	"errors"
	"fmt"

	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/driver"
)

// held lists the nodes that granted st.
func (st *hold) held() []int {
	var idx []int
	for i, t := range st.toks {
		if t != 0 {
			idx = append(idx, i)
		}
	}
	return idx
}

// Release implements driver.Backend: it deletes h on every node that
// granted it, each publishing a release. It returns nil when at least one
// node still had it, an error wrapping locker.ErrLockLost when every such
// node answered that it was gone, and one wrapping locker.ErrUnavailable
// otherwise.
func (e *Engine) Release(ctx context.Context, h *driver.Hold) error {
	st, ok := h.State.(*hold)
	if !ok {
		return fmt.Errorf("redlock: release %q: %w", h.Name, locker.ErrLockLost)
	}
	idx := st.held()
	// Done once a majority deleted it: no one can take it from the others
	// before they delete it too, or it expires there.
	answers := fanOutUntil(ctx, e, idx, e.quorum, func(ctx context.Context, i int) (struct{}, error) {
		return struct{}{}, e.releaseOn(ctx, i, st, h.Owner, st.token, st.toks[i])
	}, nil)
	deleted, gone := 0, 0
	var errs []error
	for _, a := range answers {
		switch {
		case a.err == nil:
			deleted++
		case errors.Is(a.err, errGone):
			gone++
		default:
			errs = append(errs, fmt.Errorf("node %d: %w", a.node, a.err))
		}
	}
	switch {
	case deleted > 0:
		return nil
	case gone == len(idx):
		return fmt.Errorf("redlock: release %q: gone from every node that granted it: %w", h.Name, locker.ErrLockLost)
	}
	return e.unavailable(ctx, "release", h.Name, deleted+gone, errs)
}

// Renew implements driver.Renewer: one script call per node for the holds
// it granted. A hold is renewed when a majority renewed it, and lost when
// so many nodes answered that it was gone that a majority no longer can.
func (e *Engine) Renew(ctx context.Context, holds []*driver.Hold) []error {
	per := make([][]int, len(e.nodes)) // per node, the positions of its holds
	var idx []int
	for j, h := range holds {
		for _, i := range h.State.(*hold).held() {
			if per[i] == nil {
				idx = append(idx, i)
			}
			per[i] = append(per[i], j)
		}
	}
	answers := fanOut(ctx, e, idx, func(ctx context.Context, i int) ([]int64, error) {
		keys, args := make([]string, 0, len(per[i])), make([]any, 0, 4*len(per[i]))
		for _, j := range per[i] {
			h, st := holds[j], holds[j].State.(*hold)
			keys = append(keys, st.keys[0])
			args = append(args, h.Owner, st.token, st.toks[i], h.Life().Milliseconds())
		}
		return renewScript.Run(ctx, e.nodes[i], keys, args...).Int64Slice()
	}, nil)
	renewed, gone := make([]int, len(holds)), make([]int, len(holds))
	var errs []error
	for _, a := range answers {
		if a.err != nil {
			errs = append(errs, fmt.Errorf("node %d: %w", a.node, a.err))
			continue
		}
		for k, j := range per[a.node] {
			if k < len(a.val) && a.val[k] == 1 {
				renewed[j]++
			} else {
				gone[j]++
			}
		}
	}
	results := make([]error, len(holds))
	for j, h := range holds {
		n := len(h.State.(*hold).held())
		switch {
		case renewed[j] >= e.quorum:
		case n-gone[j] < e.quorum:
			results[j] = fmt.Errorf("redlock: renew %q: gone from %d of the %d nodes that granted it, a majority is %d: %w",
				h.Name, gone[j], n, e.quorum, locker.ErrLockLost)
		default:
			results[j] = e.unavailable(ctx, "renew", h.Name, renewed[j]+gone[j], errs)
		}
	}
	return results
}
