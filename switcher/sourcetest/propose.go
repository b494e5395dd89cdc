package sourcetest

import (
	"context"
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/switcher"
)

// Propose checks the compare-and-swap of two proposers over one key or
// node that does not exist yet, as a new fleet's does, and what Read says
// of it at each step:
//   - Read of the missing key says it does not exist;
//   - of two concurrent proposals from epoch 0, exactly one creates the
//     key at epoch 1 and both return its value;
//   - a proposal from 0 once the key exists loses, writes nothing and
//     returns the value in force;
//   - a proposal from the epoch in force wins at the next epoch, one from
//     a stale epoch loses and returns the value in force;
//   - of two concurrent proposals from one epoch exactly one wins.
func Propose(t *testing.T, a, b switcher.Proposer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if d, ok, err := a.Read(ctx); ok || err != nil {
		t.Fatalf("Read() of a missing key = %+v, %v, %v; want false, nil", d, ok, err)
	}
	created := race(ctx, t, a, b, 0, 1)
	steps := []struct {
		p       switcher.Proposer
		from    uint64
		engine  string
		want    switcher.Desired
		wantWon bool
	}{
		{a, 0, "late", created, false}, // exists: the creation won
		{b, 0, "late", created, false},
		{a, 1, "y", switcher.Desired{Engine: "y", Epoch: 2}, true},
		{b, 1, "z", switcher.Desired{Engine: "y", Epoch: 2}, false}, // stale: y won
	}
	for i, st := range steps {
		d, won, err := st.p.Propose(ctx, st.from, st.engine)
		if err != nil || d != st.want || won != st.wantWon {
			t.Fatalf("step %d: Propose(%d, %q) = %+v, %v, %v; want %+v, %v, nil", i, st.from, st.engine, d, won, err, st.want, st.wantWon)
		}
		checkRead(ctx, t, b, st.want)
	}
	race(ctx, t, a, b, 2, 3)
}

// race runs two concurrent proposals from epoch from, one through each
// proposer, and checks that exactly one wins, at epoch want, that both
// return its value and that Read returns it too; it returns that value.
func race(ctx context.Context, t *testing.T, a, b switcher.Proposer, from, want uint64) switcher.Desired {
	t.Helper()
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
			d, won, err := c.p.Propose(ctx, from, c.engine)
			results <- result{d, won, err}
		}()
	}
	r1, r2 := <-results, <-results
	if r1.err != nil || r2.err != nil {
		t.Fatalf("concurrent Propose(%d) errors: %v, %v", from, r1.err, r2.err)
	}
	if r1.won == r2.won {
		t.Errorf("concurrent proposals from %d won = %v and %v; want exactly one winner", from, r1.won, r2.won)
	}
	if r1.d != r2.d || r1.d.Epoch != want {
		t.Errorf("concurrent proposals from %d returned %+v and %+v; want the same value at epoch %d", from, r1.d, r2.d, want)
	}
	checkRead(ctx, t, a, r1.d)
	return r1.d
}

// checkRead checks that Read returns want.
func checkRead(ctx context.Context, t *testing.T, p switcher.Proposer, want switcher.Desired) {
	t.Helper()
	if d, ok, err := p.Read(ctx); d != want || !ok || err != nil {
		t.Errorf("Read() = %+v, %v, %v; want %+v, true, nil", d, ok, err, want)
	}
}
