package zk_test

import (
	"errors"
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/engines/zk"
	"github.com/orthrus-go/orthrus/locker"
)

// The ride-through window is an ensemble's: several servers get two thirds
// of the session timeout, one server none, and the option sets it.
func TestRideThroughWindow(t *testing.T) {
	for _, tc := range []struct {
		name    string
		servers []string
		opts    []zk.Option
		want    time.Duration
	}{
		{"one server", []string{zkAddr}, nil, 0},
		{"several servers", []string{zkAddr, zkAddr, zkAddr}, nil, zk.DefaultSessionTimeout * 2 / 3},
		{"session timeout", []string{zkAddr, zkAddr}, []zk.Option{zk.WithSessionTimeout(3 * time.Second)}, 2 * time.Second},
		{"set", []string{zkAddr}, []zk.Option{zk.WithRideThrough(time.Second)}, time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEngine(t, tc.servers, tc.opts...)
			defer e.Close()
			if got := e.RideThrough(); got != tc.want {
				t.Errorf("RideThrough() = %v; want %v", got, tc.want)
			}
		})
	}
	if _, err := zk.New([]string{zkAddr}, zk.WithRideThrough(-time.Second)); !errors.Is(err, locker.ErrInvalidArgument) {
		t.Errorf("New(WithRideThrough(-1s)) = %v; want ErrInvalidArgument", err)
	}
}
