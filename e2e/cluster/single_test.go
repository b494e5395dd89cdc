package cluster_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/config"
	"github.com/orthrus-go/orthrus/internal/cpustall"
	"github.com/orthrus-go/orthrus/internal/testserver"
	"github.com/orthrus-go/orthrus/switcher"
)

// An engine over one server has no election to ride out: killed, it still
// switches within 300ms (its refusal trips the breaker at once); frozen,
// within a second (three health checks of 300ms). The ride-through window
// is for clusters only. On a machine short of CPU the bounds stretch by
// the CPU stall meanwhile (a ZooKeeper kill beside a CPU hog: 499ms).
func TestSingleNodeStillSwitchesFast(t *testing.T) {
	for _, kind := range []string{"etcd", "zk"} {
		for _, fault := range []string{"kill", "pause"} {
			t.Run(kind+"/"+fault, func(t *testing.T) {
				target := map[string]time.Duration{"kill": 300 * time.Millisecond, "pause": time.Second}[fault]
				got, stall := singleSwitch(t, kind, fault)
				want := cpustall.Stretch(target, stall)
				t.Logf("%s %s: switched %v after the fault, CPU stall %.0f%%", fault, kind, ms(got), 100*stall)
				if got > want {
					t.Errorf("%s %s: switched %v after the fault; want <= %v (%v stretched by a CPU stall of %.0f%%)", fault, kind, ms(got), ms(want), target, 100*stall)
				}
			})
		}
	}
}

// singleSwitch opens a switcher over one server of kind and Redis, injures
// the server and returns how long the switch took, and the CPU stall
// meanwhile.
func singleSwitch(t *testing.T, kind, fault string) (time.Duration, float64) {
	t.Helper()
	var s *testserver.Server
	field := "endpoints"
	if kind == "etcd" {
		s = testserver.Etcd(t)
	} else {
		s, field = testserver.ZooKeeper(t), "servers"
	}
	t.Cleanup(func() { _ = s.Resume() })
	redis := testserver.Redis(t)
	yaml := fmt.Sprintf("engines:\n  - {name: %s, type: %s, %s: [%q]}\n  - {name: redis, type: redis, addrs: [%q]}\n",
		kind, kind, field, s.Addr(), redis.Addr())
	path := filepath.Join(t.TempDir(), "single.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	switched := make(chan time.Time, 4)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sw, err := config.Open(ctx, cfg, config.WithSwitcherOptions(switcher.OnSwitch(func(ev switcher.Event) {
		if ev.Reason == switcher.ReasonBreaker {
			switched <- ev.At
		}
	})))
	if err != nil {
		t.Fatal(err)
	}
	defer sw.Close()
	span := cpustall.Start()
	at := time.Now()
	if fault == "kill" {
		err = s.Kill()
	} else {
		err = s.Pause()
	}
	if err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-switched:
		return ev.Sub(at), span.Share()
	case <-time.After(10 * time.Second):
		t.Fatalf("%s %s: no switch within 10s", fault, kind)
		return 0, 0
	}
}
