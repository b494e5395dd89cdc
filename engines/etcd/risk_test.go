package etcd_test

import (
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/engines/etcd"
	"github.com/orthrus-go/orthrus/internal/testserver"
	"github.com/orthrus-go/orthrus/locker/lockertest"
)

// A frozen server fails the refreshes of the shared lease: its holds are
// reported at risk before they are lost.
func TestAtRiskBeforeLost(t *testing.T) {
	s := testserver.Etcd(t)
	causes := &lockertest.Causes{}
	e := newEngine(t, newClient(t, s.Addr()), etcd.WithRequestTimeout(300*time.Millisecond), etcd.WithObserver(causes))
	lockertest.AtRiskBeforeLost(t, e, causes, 2*time.Second, s.Pause, s.Resume)
}
