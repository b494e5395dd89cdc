package etcd_test

import (
	"errors"
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/engines/etcd"
	"github.com/orthrus-go/orthrus/locker"
)

// The ride-through window is a cluster's: a client with several endpoints
// gets the default, one with a single endpoint none, and the option sets it.
func TestRideThroughWindow(t *testing.T) {
	for _, tc := range []struct {
		name      string
		endpoints []string
		opts      []etcd.Option
		want      time.Duration
	}{
		{"one endpoint", []string{endpoint}, nil, 0},
		{"several endpoints", []string{endpoint, endpoint, endpoint}, nil, etcd.DefaultRideThrough},
		{"set", []string{endpoint}, []etcd.Option{etcd.WithRideThrough(time.Second)}, time.Second},
		{"set to none", []string{endpoint, endpoint}, []etcd.Option{etcd.WithRideThrough(0)}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEngine(t, newClient(t, tc.endpoints...), tc.opts...)
			if got := e.RideThrough(); got != tc.want {
				t.Errorf("RideThrough() = %v; want %v", got, tc.want)
			}
		})
	}
	c := newClient(t, endpoint)
	for _, opt := range []etcd.Option{etcd.WithRideThrough(-time.Second), etcd.WithAttemptTimeout(0)} {
		if _, err := etcd.New(c, opt); !errors.Is(err, locker.ErrInvalidArgument) {
			t.Errorf("New() with a bad option = %v; want ErrInvalidArgument", err)
		}
	}
}
