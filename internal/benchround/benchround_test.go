package benchround_test

import (
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/orthrus-go/orthrus/internal/benchround"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestRotate(t *testing.T) {
	names := []string{"a", "b", "c"}
	for _, c := range []struct {
		round string
		want  []string
	}{{"", names}, {"x", names}, {"0", names}, {"1", []string{"b", "c", "a"}}, {"2", []string{"c", "a", "b"}}, {"3", names}} {
		t.Setenv("ORTHRUS_BENCH_ROUND", c.round)
		if got := benchround.Rotate(slices.Clone(names)); !slices.Equal(got, c.want) {
			t.Errorf("round %q: Rotate = %v, want %v", c.round, got, c.want)
		}
	}
}

// counted is a Mutex that counts its cycles and takes about a microsecond
// for each, so that the time spent in it is never zero.
type counted struct{ cycles atomic.Int64 }

func (c *counted) Lock() error   { c.cycles.Add(1); time.Sleep(time.Microsecond); return nil }
func (c *counted) Unlock() error { return nil }

func TestAlternateParallel(t *testing.T) {
	const owners = 4
	var (
		mu    sync.Mutex
		made  = map[int][]*counted{}
		spent []time.Duration
		n     int
	)
	testing.Benchmark(func(b *testing.B) {
		made = map[int][]*counted{}
		spent = benchround.AlternateParallel(b, owners, func(i int) []benchround.Mutex {
			ms := []*counted{{}, {}}
			mu.Lock()
			made[i] = ms
			mu.Unlock()
			return []benchround.Mutex{ms[0], ms[1]}
		})
		n = b.N
	})
	if len(made) < owners {
		t.Fatalf("mutexes made for owners %v, want %d distinct owners", made, owners)
	}
	var total [2]int64
	for i, ms := range made {
		for j, m := range ms {
			if m.cycles.Load() == 0 {
				t.Errorf("owner %d's mutex %d made no cycle", i, j)
			}
			total[j] += m.cycles.Load()
		}
	}
	// Each owner warms every mutex once, untimed, then rounds share b.N.
	if want := int64(n + len(made)); total[0] != want || total[1] != want {
		t.Errorf("cycles %v, want %d of each (b.N %d and a warm-up per owner)", total, want, n)
	}
	if len(spent) != 2 || spent[0] <= 0 || spent[1] <= 0 {
		t.Errorf("spent %v, want a positive time for each implementation", spent)
	}
}
