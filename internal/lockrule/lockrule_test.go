package lockrule

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/orthrus-go/orthrus/locker/inspect"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var (
	mutex = Entry{Kind: inspect.KindMutex}
	read  = Entry{Kind: inspect.KindRead}
	write = Entry{Kind: inspect.KindWrite}
	down  = Entry{Kind: inspect.KindRead, Downgrade: true}
)

func permits(n int) Entry { return Entry{Kind: inspect.KindPermit, Permits: n} }

func TestDecide(t *testing.T) {
	tests := []struct {
		name  string
		q     []Entry
		own   int
		count int
		want  Verdict
	}{
		{"mutex first", []Entry{mutex}, 0, 0, Verdict{Granted: true}},
		{"mutex second waits for the one before", []Entry{mutex, mutex, mutex}, 2, 0, Verdict{Blockers: []int{1}}},
		{"readers share", []Entry{read, read}, 1, 0, Verdict{Granted: true}},
		{"reader behind a waiting writer waits", []Entry{read, write, read}, 2, 0, Verdict{Blockers: []int{1}}},
		{"reader waits for the last writer before it", []Entry{write, read, write, read}, 3, 0, Verdict{Blockers: []int{2}}},
		{"writer behind readers waits for the one before", []Entry{read, read, write}, 2, 0, Verdict{Blockers: []int{1}}},
		{"downgraded reader is granted anywhere", []Entry{write, read, down}, 2, 0, Verdict{Granted: true}},
		{"first writer waits for a downgraded reader", []Entry{write, down}, 0, 0, Verdict{Blockers: []int{1}}},
		{"reader after a downgrade shares", []Entry{down, read}, 1, 0, Verdict{Granted: true}},
		{"permits that fit", []Entry{permits(2), permits(1)}, 1, 3, Verdict{Granted: true}},
		{"head waits for all before and the count", []Entry{permits(2), permits(1), permits(1)}, 2, 3, Verdict{Blockers: []int{0, 1}, Count: true}},
		{"behind the head waits for the one before", []Entry{permits(2), permits(2), permits(1)}, 2, 3, Verdict{Blockers: []int{1}}},
		{"a small request does not jump a large one", []Entry{permits(1), permits(3), permits(1)}, 2, 3, Verdict{Blockers: []int{1}}},
		{"lowered count keeps the head waiting", []Entry{permits(2), permits(1)}, 1, 1, Verdict{Blockers: []int{0}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Decide(tt.q, tt.own, tt.count)
			if got.Granted != tt.want.Granted || got.Count != tt.want.Count || !slices.Equal(got.Blockers, tt.want.Blockers) {
				t.Fatalf("Decide(%v, %d, %d) = %+v; want %+v", tt.q, tt.own, tt.count, got, tt.want)
			}
		})
	}
}

func TestGrantsKeepsHolders(t *testing.T) {
	q := []Entry{permits(2), permits(1)}
	got := Grants(q, []bool{true, false}, 1) // the count was lowered under a holder
	if want := []bool{true, false}; !slices.Equal(got, want) {
		t.Fatalf("Grants = %v; want %v", got, want)
	}
}

func TestWaitsFor(t *testing.T) {
	tests := []struct {
		k      inspect.Kind
		other  Entry
		before bool
		want   bool
	}{
		{inspect.KindMutex, mutex, true, true},
		{inspect.KindMutex, mutex, false, false},
		{inspect.KindWrite, read, true, true},
		{inspect.KindWrite, write, true, true},
		{inspect.KindWrite, down, true, true},
		{inspect.KindWrite, read, false, false},
		{inspect.KindWrite, write, false, false},
		{inspect.KindWrite, down, false, true},
		{inspect.KindRead, read, true, false},
		{inspect.KindRead, write, true, true},
		{inspect.KindRead, down, true, false},
		{inspect.KindRead, read, false, false},
		{inspect.KindRead, write, false, false},
		{inspect.KindRead, down, false, false},
	}
	for _, tt := range tests {
		if got := WaitsFor(tt.k, tt.other, tt.before); got != tt.want {
			t.Errorf("WaitsFor(%v, %+v, before %v) = %v; want %v", tt.k, tt.other, tt.before, got, tt.want)
		}
	}
}

func heavy(e Entry, w int) Entry { e.Weight = w; return e }

func TestDecideHeldWeights(t *testing.T) {
	tests := []struct {
		name  string
		q     []Entry
		held  []bool
		own   int
		count int
		want  Verdict
	}{
		// The holder, at its place in line, ranks after a heavier waiter.
		{"heavier waiter ranks ahead", []Entry{mutex, mutex, heavy(mutex, 3)}, []bool{true, false, false}, 1, 0, Verdict{Blockers: []int{0}}},
		{"light waiter waits for the heavier one", []Entry{mutex, mutex, heavy(mutex, 3)}, []bool{false, false, false}, 0, 0, Verdict{Blockers: []int{2}}},
		{"heaviest waits for the holder", []Entry{mutex, mutex, heavy(mutex, 3)}, []bool{true, false, false}, 2, 0, Verdict{Blockers: []int{0}}},
		{"heavier waiter does not take a light hold", []Entry{mutex, heavy(mutex, 10)}, []bool{true, false}, 1, 0, Verdict{Blockers: []int{0}}},
		{"heavier waiter is granted when nothing is held", []Entry{mutex, heavy(mutex, 2)}, nil, 1, 0, Verdict{Granted: true}},
		{"reader waits for a heavier writer behind it", []Entry{read, read, heavy(write, 2)}, []bool{true, false, false}, 1, 0, Verdict{Blockers: []int{2}}},
		{"heavy reader passes a light waiting writer", []Entry{read, write, heavy(read, 2)}, []bool{true, false, false}, 2, 0, Verdict{Granted: true}},
		{"permits ahead count by rank", []Entry{permits(1), permits(1), heavy(permits(2), 2)}, []bool{true, false, false}, 1, 3, Verdict{Blockers: []int{0, 2}, Count: true}},
		{"heavy permits fit first", []Entry{permits(1), permits(1), heavy(permits(2), 2)}, []bool{true, false, false}, 2, 3, Verdict{Granted: true}},
		{"a recorded grant stays", []Entry{permits(2), permits(1)}, []bool{true, false}, 0, 1, Verdict{Granted: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := DecideHeld(tt.q, tt.held, tt.own, tt.count)
			if !sameVerdict(got, tt.want) {
				t.Fatalf("DecideHeld(%v, %v, %d, %d) = %+v; want %+v", tt.q, tt.held, tt.own, tt.count, got, tt.want)
			}
		})
	}
}

func sameVerdict(a, b Verdict) bool {
	return a.Granted == b.Granted && a.Count == b.Count && slices.Equal(a.Blockers, b.Blockers)
}

// randomQueue is a queue of one lock: a mutex's, a read-write lock's (with
// downgrades anywhere) or a semaphore's, of weights 1 to maxWeight.
func randomQueue(rng *rand.Rand, maxWeight int) (q []Entry, count int) {
	family, n := rng.IntN(3), 1+rng.IntN(7)
	for range n {
		var e Entry
		switch family {
		case 0:
			e = mutex
		case 1:
			e = []Entry{read, write, down}[rng.IntN(3)]
		default:
			e = permits(1 + rng.IntN(3))
		}
		e.Weight = 1 + rng.IntN(maxWeight)
		q = append(q, e)
	}
	return q, rng.IntN(7)
}

// eachRandomQueue calls check with 20000 random queues of weights 1 to
// maxWeight, from seed.
func eachRandomQueue(seed uint64, maxWeight int, check func(q []Entry, count int)) {
	rng := rand.New(rand.NewPCG(27, seed))
	for range 20000 {
		check(randomQueue(rng, maxWeight))
	}
}

// TestWeightOneIsFIFO: with every weight 1 and the grants the FIFO rule
// gives recorded, the weighted rule's verdicts and blockers are the FIFO
// rule's, entry by entry.
func TestWeightOneIsFIFO(t *testing.T) {
	eachRandomQueue(3, 1, func(q []Entry, count int) {
		held := make([]bool, len(q))
		for i := range q {
			held[i] = fifoDecide(q, i, count).Granted
		}
		for i := range q {
			want := fifoDecide(q, i, count)
			if got := DecideHeld(q, held, i, count); !sameVerdict(got, want) {
				t.Fatalf("DecideHeld(%v, %v, %d, %d) = %+v; the FIFO rule gives %+v", q, held, i, count, got, want)
			}
			if got := Decide(q, i, count); !sameVerdict(got, want) {
				t.Fatalf("Decide(%v, %d, %d) = %+v; the FIFO rule gives %+v", q, i, count, got, want)
			}
		}
	})
}

// TestWeightedGrantsSettle: the grants of one pass are the rule's fixed
// point (granting them grants nobody else), no holder loses its grant,
// and a mutex with no holder goes to its heaviest, oldest waiter.
func TestWeightedGrantsSettle(t *testing.T) {
	eachRandomQueue(4, 4, func(q []Entry, count int) {
		held := make([]bool, len(q))
		for i := range held {
			held[i] = i%3 == 1 && q[i].Kind != inspect.KindMutex
		}
		g := Grants(q, held, count)
		if again := Grants(q, g, count); !slices.Equal(again, g) {
			t.Fatalf("Grants(%v, %v, %d) = %v, then %v", q, held, count, g, again)
		}
		for i := range q {
			if held[i] && !g[i] {
				t.Fatalf("Grants(%v, %v, %d) = %v: entry %d lost its grant", q, held, count, g, i)
			}
		}
		if q[0].Kind == inspect.KindMutex {
			first := slices.IndexFunc(q, func(e Entry) bool { return e.Weight == slices.MaxFunc(q, byWeight).Weight })
			if want := slices.Index(g, true); want != first || slices.Contains(g[first+1:], true) {
				t.Fatalf("Grants(%v) = %v; want only entry %d", q, g, first)
			}
		}
	})
}

func byWeight(a, b Entry) int { return a.Weight - b.Weight }

// fifoDecide is the rule before weights, strict FIFO from the queue alone,
// kept as the oracle that weight 1 must reproduce.
func fifoDecide(q []Entry, own, count int) Verdict {
	e := q[own]
	switch {
	case e.Downgrade:
		return Verdict{Granted: true}
	case e.Kind == inspect.KindPermit:
		sum, headBefore := 0, false
		for i := range own {
			sum += q[i].Permits
			headBefore = headBefore || !Fits(sum, 0, count)
		}
		if Fits(sum, q[own].Permits, count) {
			return Verdict{Granted: true}
		}
		if headBefore {
			return Verdict{Blockers: []int{own - 1}}
		}
		v := Verdict{Count: true}
		for i := range own {
			v.Blockers = append(v.Blockers, i)
		}
		return v
	case e.Kind == inspect.KindRead:
		for i := own - 1; i >= 0; i-- {
			if Exclusive(q[i].Kind) {
				return Verdict{Blockers: []int{i}}
			}
		}
		return Verdict{Granted: true}
	}
	if own > 0 {
		return Verdict{Blockers: []int{own - 1}}
	}
	for i := range q {
		if q[i].Downgrade {
			return Verdict{Blockers: []int{i}}
		}
	}
	return Verdict{Granted: true}
}

// TestGrantedIsDecideHelds: Granted is DecideHeld's verdict.
func TestGrantedIsDecideHelds(t *testing.T) {
	eachRandomQueue(5, 3, func(q []Entry, count int) {
		held := make([]bool, len(q))
		for i := range held {
			held[i] = i%2 == 0 && q[i].Kind != inspect.KindMutex
		}
		for i := range q {
			if got, want := Granted(q, held, i, count), DecideHeld(q, held, i, count).Granted; got != want {
				t.Fatalf("Granted(%v, %v, %d, %d) = %v; DecideHeld's verdict is %v", q, held, i, count, got, want)
			}
		}
	})
}
