package driver

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/orthrus-go/orthrus/locker"
)

// weighBackend grants at once and records the weight each Acquire saw.
type weighBackend struct {
	weighs bool
	seen   chan int
}

func (b weighBackend) Acquire(_ context.Context, h *Hold, _ bool) (bool, error) {
	b.seen <- h.Weight
	return true, nil
}

func (weighBackend) Release(context.Context, *Hold) error { return nil }

func (b weighBackend) Weighs() error {
	if !b.weighs {
		return errors.New("no weights here")
	}
	return nil
}

func TestWeights(t *testing.T) {
	for _, tc := range []struct {
		desc   string
		weighs bool
		opts   []locker.Option
		want   int // the weight Acquire sees; 0: refused before Acquire
	}{
		{"default", false, nil, 1},
		{"WithWeight(1) anywhere", false, []locker.Option{locker.WithWeight(1)}, 1},
		{"WithWeight(3) refused", false, []locker.Option{locker.WithWeight(3)}, 0},
		{"WithWeight(3) on a Weigher", true, []locker.Option{locker.WithWeight(3)}, 3},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			b := weighBackend{weighs: tc.weighs, seen: make(chan int, 1)}
			c := NewCore("test", b, slog.Default())
			defer c.Close(context.Background())
			l, err := c.NewLocker("w", tc.opts...)
			if err != nil {
				t.Fatalf("NewLocker() = %v", err)
			}
			err = l.Lock()
			switch {
			case tc.want == 0:
				if !errors.Is(err, errors.ErrUnsupported) || !strings.Contains(err.Error(), "WithWeight(3): no weights here") || len(b.seen) != 0 {
					t.Fatalf("Lock() = %v, Acquire called %d times; want ErrUnsupported naming WithWeight(3) before Acquire", err, len(b.seen))
				}
			case err != nil:
				t.Fatalf("Lock() = %v; want nil", err)
			default:
				if got := <-b.seen; got != tc.want {
					t.Errorf("Acquire saw weight %d; want %d", got, tc.want)
				}
				l.Unlock()
			}
		})
	}
}

func TestWithWeightRange(t *testing.T) {
	for _, w := range []int{0, -1, 11} {
		if _, err := Resolve(locker.WithWeight(w)); !errors.Is(err, locker.ErrInvalidArgument) || !strings.Contains(err.Error(), "WithWeight(") {
			t.Errorf("Resolve(WithWeight(%d)) = %v; want ErrInvalidArgument naming WithWeight", w, err)
		}
	}
	if s, err := Resolve(locker.WithWeight(10)); err != nil || s.Weight != 10 {
		t.Errorf("Resolve(WithWeight(10)) = %+v, %v; want weight 10", s, err)
	}
}
