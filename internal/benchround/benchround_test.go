package benchround_test

import (
	"slices"
	"testing"

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
