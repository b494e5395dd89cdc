package sourcetest

import (
	"context"
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/switcher"
)

// Propose checks the compare-and-swap of two proposers over one missing
// key or node: the first proposal creates it at epoch 1, a proposal from
// a stale epoch loses and returns the value in force, and of two
// concurrent proposals from one epoch exactly one wins while both return
// the winner's value.
func Propose(t *testing.T, a, b switcher.Proposer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	steps := []struct {
		p       switcher.Proposer
		from    uint64
		engine  string
		want    switcher.Desired
		wantWon bool
	}{
		{a, 0, "x", switcher.Desired{Engine: "x", Epoch: 1}, true},
		{a, 1, "y", switcher.Desired{Engine: "y", Epoch: 2}, true},
		{b, 1, "z", switcher.Desired{Engine: "y", Epoch: 2}, false}, // stale: y won
	}
	for i, st := range steps {
		d, won, err := st.p.Propose(ctx, st.from, st.engine)
		if err != nil || d != st.want || won != st.wantWon {
			t.Fatalf("step %d: Propose(%d, %q) = %+v, %v, %v; want %+v, %v, nil", i, st.from, st.engine, d, won, err, st.want, st.wantWon)
		}
	}
	type result struct {
		d   switcher.Desired
		won bool
		err error
	}
	results := make(chan result, 2)
	for _, c := range []struct {
		p      switcher.Proposer
		engine string
	}{{a, "left"}, {b, "right"}} {
		go func() {
			d, won, err := c.p.Propose(ctx, 2, c.engine)
			results <- result{d, won, err}
		}()
	}
	r1, r2 := <-results, <-results
	if r1.err != nil || r2.err != nil {
		t.Fatalf("concurrent Propose errors: %v, %v", r1.err, r2.err)
	}
	if r1.won == r2.won {
		t.Errorf("concurrent proposals won = %v and %v; want exactly one winner", r1.won, r2.won)
	}
	if r1.d != r2.d || r1.d.Epoch != 3 {
		t.Errorf("concurrent proposals returned %+v and %+v; want the same value at epoch 3", r1.d, r2.d)
	}
}
