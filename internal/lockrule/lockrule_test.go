package lockrule

import (
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
