package lockrule

import (
	"slices"
	"testing"

	"go.uber.org/goleak"

	"github.com/orthrus-go/orthrus/locker"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var (
	mutex = Entry{Kind: locker.KindMutex}
	read  = Entry{Kind: locker.KindRead}
	write = Entry{Kind: locker.KindWrite}
	down  = Entry{Kind: locker.KindRead, Downgrade: true}
)

func permits(n int) Entry { return Entry{Kind: locker.KindPermit, Permits: n} }

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
		k      locker.Kind
		other  Entry
		before bool
		want   bool
	}{
		{locker.KindMutex, mutex, true, true},
		{locker.KindMutex, mutex, false, false},
		{locker.KindWrite, read, true, true},
		{locker.KindWrite, write, true, true},
		{locker.KindWrite, down, true, true},
		{locker.KindWrite, read, false, false},
		{locker.KindWrite, write, false, false},
		{locker.KindWrite, down, false, true},
		{locker.KindRead, read, true, false},
		{locker.KindRead, write, true, true},
		{locker.KindRead, down, true, false},
		{locker.KindRead, read, false, false},
		{locker.KindRead, write, false, false},
		{locker.KindRead, down, false, false},
	}
	for _, tt := range tests {
		if got := WaitsFor(tt.k, tt.other, tt.before); got != tt.want {
			t.Errorf("WaitsFor(%v, %+v, before %v) = %v; want %v", tt.k, tt.other, tt.before, got, tt.want)
		}
	}
}
