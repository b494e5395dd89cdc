package zk_test

import (
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/engines/zk"
	"github.com/orthrus-go/orthrus/internal/testserver"
	"github.com/orthrus-go/orthrus/locker/lockertest"
)

// A frozen server drops the session's connection: its holds are reported
// at risk before the session timeout loses them.
func TestAtRiskBeforeLost(t *testing.T) {
	s := testserver.ZooKeeper(t)
	causes := &lockertest.Causes{}
	e := newEngine(t, []string{s.Addr()}, zk.WithSessionTimeout(2*time.Second), zk.WithObserver(causes))
	defer e.Close()
	lockertest.AtRiskBeforeLost(t, e, causes, 2*time.Second, s.Pause, s.Resume)
}
