package elect_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/orthrus-go/orthrus/elect"
	"github.com/orthrus-go/orthrus/locker"
)

// The election's contract on each engine and through the switcher (one
// leader at a time, Resign, a lost leadership, campaigning twice, Resign
// without the leadership) is lockertest.RunElection's, run from the
// engines' and the switcher's tests; this package's tests check what no
// engine changes, and the failures (a leader killed, frozen, switched
// away from) in processes of their own.

func newCandidate(t *testing.T, e locker.Engine, name string, opts ...elect.Option) *elect.Candidate {
	t.Helper()
	c, err := elect.New(e, name, opts...)
	if err != nil {
		t.Fatalf("New(%q) = %v", name, err)
	}
	return c
}

func TestBadOptions(t *testing.T) {
	e := servers.Processes(t)["mem"](t)
	for _, tc := range []struct {
		opts []elect.Option
		want string
	}{
		{[]elect.Option{elect.WithTTL(0)}, "WithTTL(0s)"},
		{[]elect.Option{elect.WithValue(strings.Repeat("v", elect.MaxValueLen+1))}, "WithValue"},
		{[]elect.Option{elect.WithObserver(nil)}, "WithObserver"},
		{[]elect.Option{nil}, "nil Option"},
	} {
		if _, err := elect.New(e, "leader", tc.opts...); !errors.Is(err, locker.ErrInvalidArgument) || !strings.Contains(fmt.Sprint(err), tc.want) {
			t.Errorf("New(%s) = %v; want ErrInvalidArgument naming it", tc.want, err)
		}
	}
	if _, err := elect.New(e, ""); !errors.Is(err, locker.ErrInvalidName) {
		t.Errorf("New(\"\") = %v; want ErrInvalidName", err)
	}
	if _, err := elect.New(nil, "leader"); !errors.Is(err, locker.ErrInvalidArgument) {
		t.Errorf("New(nil engine) = %v; want ErrInvalidArgument", err)
	}
}
