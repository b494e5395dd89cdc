package telemetry_test

import (
	"context"
	"errors"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/engines/mem"
	"github.com/orthrus-go/orthrus/internal/testserver"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/switcher"
)

// chanSource is a switcher.Source fed by a channel.
type chanSource chan switcher.Desired

func (c chanSource) Watch(ctx context.Context, apply func(switcher.Desired)) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case d := <-c:
			apply(d)
		}
	}
}

// TestFaults kills the engine a switcher uses and checks what an SRE is
// paged on: engine errors by operation, a hold lost for want of renewal,
// the breaker open, the switch it caused, the retried acquisition, and a
// source's switch deferred because its engine is down.
func TestFaults(t *testing.T) {
	r := newRig(t)
	srvA := testserver.Redis(t)
	a := newEngine(t, newClient(t, srvA.Addr()), "redis-a", r)
	b := newEngine(t, newClient(t, redisB), "redis-b", r)
	src := make(chanSource)
	// No health checks: the acquisition after the kill is what trips the
	// breaker, and is retried on redis-b.
	sw, err := switcher.New([]locker.Engine{a, b}, switcher.WithName("sw"), switcher.WithObserver(r),
		switcher.WithSource(src), switcher.WithHealthCheck(time.Hour, time.Second),
		switcher.WithBreaker(switcher.DefaultFailures, time.Hour)) // open until the gauges are read
	if err != nil {
		t.Fatalf("switcher.New() = %v", err)
	}
	closed := false
	defer func() {
		if !closed {
			_ = sw.Close()
		}
	}()

	held, renewing := newLocker(t, sw, "held"), newLocker(t, sw, "renewing", locker.WithTTL(600*time.Millisecond))
	for _, l := range []locker.Locker{held, renewing} {
		if err := l.Lock(); err != nil {
			t.Fatalf("Lock() = %v", err)
		}
	}
	if err := srvA.Kill(); err != nil {
		t.Fatal(err)
	}

	moved := newLocker(t, sw, "moved")
	if err := moved.Lock(); err != nil {
		t.Fatalf("Lock() with redis-a down = %v; want it granted on redis-b", err)
	}
	if ev := await(t, r.switched, "switch"); ev.Reason != switcher.ReasonBreaker || ev.To != "redis-b" {
		t.Fatalf("switch = %+v; want to redis-b by breaker", ev)
	}
	if got := moved.(locker.Lease).Engine(); got != "redis-b" {
		t.Fatalf("Engine() = %q; want redis-b", got)
	}
	await(t, renewing.(locker.Lease).Lost(), "lost hold")
	if err := renewing.Unlock(); !errors.Is(err, locker.ErrLockLost) {
		t.Fatalf("Unlock() = %v; want ErrLockLost", err)
	}
	if err := held.Unlock(); !errors.Is(err, locker.ErrUnavailable) {
		t.Fatalf("Unlock() with redis-a down = %v; want ErrUnavailable", err)
	}
	direct := newLocker(t, a, "direct")
	if ok, err := direct.TryLock(); ok || !errors.Is(err, locker.ErrUnavailable) {
		t.Fatalf("TryLock() on redis-a down = %v, %v; want false, ErrUnavailable", ok, err)
	}
	src <- switcher.Desired{Engine: "redis-a"}
	if ev := await(t, r.switched, "deferred switch"); ev.Reason != switcher.ReasonDeferred || ev.To != "redis-a" {
		t.Fatalf("event = %+v; want a deferred switch to redis-a", ev)
	}

	// The Unlock on redis-a returned at once, its breaker open; the
	// release goes on in the background and is recorded when the dead
	// engine refuses it.
	released := `orthrus_lock_hold_duration_seconds_count{end="released",engine="redis-a"}`
	got := r.gather(t)
	for deadline := time.Now().Add(10 * time.Second); got[released] == 0 && time.Now().Before(deadline); got = r.gather(t) {
		time.Sleep(5 * time.Millisecond)
	}
	// A collection reads the holds count before the histograms: the one
	// that saw the release may have run beside its HoldEnd, which
	// lowered the count first. The next one sees both.
	got = r.gather(t)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("gathered:\n%s", dump(got))
		}
	})
	const ea, eb, s = `engine="redis-a"`, `engine="redis-b"`, `switcher="sw"`
	checkFamily(t, got, "orthrus_lock_acquisitions_total", map[string]float64{
		`orthrus_lock_acquisitions_total{` + ea + `,result="granted"}`:     2,
		`orthrus_lock_acquisitions_total{` + ea + `,result="unavailable"}`: 2, // the Lock that moved on, the direct TryLock
		`orthrus_lock_acquisitions_total{` + eb + `,result="granted"}`:     1,
	})
	for _, op := range []string{"acquire", "release", "renew"} {
		k := `orthrus_lock_engine_errors_total{` + ea + `,operation="` + op + `"}`
		if got[k] < 1 {
			t.Errorf("%s = %v; want at least 1", k, got[k])
		}
	}
	if k := `orthrus_lock_engine_errors_total{` + ea + `,operation="acquire"}`; got[k] != 2 {
		t.Errorf("%s = %v; want 2", k, got[k])
	}
	if k := `orthrus_lock_renewals_total{` + ea + `,result="failed"}`; got[k] < 1 {
		t.Errorf("%s = %v; want at least 1", k, got[k])
	}
	checkFamily(t, got, "orthrus_lock_lost_total", map[string]float64{
		`orthrus_lock_lost_total{cause="expired",` + ea + `}`: 1,
	})
	checkFamily(t, got, "orthrus_lock_hold_duration_seconds_count", map[string]float64{
		`orthrus_lock_hold_duration_seconds_count{end="lost",` + ea + `}`:     1,
		`orthrus_lock_hold_duration_seconds_count{end="released",` + ea + `}`: 1, // given up: it expires on the engine
	})
	checkFamily(t, got, "orthrus_lock_holds", map[string]float64{
		`orthrus_lock_holds{` + ea + `}`: 0,
		`orthrus_lock_holds{` + eb + `}`: 1,
	})
	checkFamily(t, got, "orthrus_switcher_switches_total", map[string]float64{
		`orthrus_switcher_switches_total{from="redis-a",reason="breaker",` + s + `,to="redis-b"}`: 1,
	})
	checkFamily(t, got, "orthrus_switcher_deferred_total", map[string]float64{
		`orthrus_switcher_deferred_total{from="redis-b",` + s + `,to="redis-a"}`: 1,
	})
	checkFamily(t, got, "orthrus_switcher_retries_total", map[string]float64{`orthrus_switcher_retries_total{` + s + `}`: 1})
	checkFamily(t, got, "orthrus_switcher_acquisitions_total", map[string]float64{
		`orthrus_switcher_acquisitions_total{` + ea + `,result="granted",` + s + `}`: 2,
		`orthrus_switcher_acquisitions_total{` + eb + `,result="granted",` + s + `}`: 1,
	})
	for k, want := range map[string]float64{
		`orthrus_switcher_breaker_state{` + ea + `,state="open",` + s + `}`:   1,
		`orthrus_switcher_breaker_state{` + ea + `,state="closed",` + s + `}`: 0,
		`orthrus_switcher_breaker_state{` + eb + `,state="closed",` + s + `}`: 1,
		`orthrus_switcher_engine_current{` + eb + `,` + s + `}`:               1,
	} {
		if got[k] != want {
			t.Errorf("%s = %v; want %v", k, got[k], want)
		}
	}

	checkDocs(t, got)

	// Closing the switcher ends the hold still held on redis-b, and its
	// gauges.
	closed = true
	if err := sw.Close(); err != nil {
		t.Logf("Close() = %v (redis-a is down)", err)
	}
	got = r.gather(t)
	if k := `orthrus_lock_lost_total{cause="closed",` + eb + `}`; got[k] != 1 {
		t.Errorf("%s = %v; want 1", k, got[k])
	}
	for _, name := range []string{"orthrus_switcher_engine_current", "orthrus_switcher_epoch", "orthrus_switcher_breaker_state", "orthrus_switcher_retries_total"} {
		checkFamily(t, got, name, nil)
	}
}

// TestLostCauses checks the causes this process cannot see coming: a
// fixed lease running out, and the engine ending a hold (here the
// in-process engine's ForceUnlock, as a ZooKeeper session expiry would).
func TestLostCauses(t *testing.T) {
	r := newRig(t)
	b := newEngine(t, newClient(t, redisB), "redis-b", r)
	defer b.Close()
	m, err := mem.New(mem.WithName("mem"), mem.WithObserver(r))
	if err != nil {
		t.Fatalf("mem.New() = %v", err)
	}
	defer m.Close()

	lease := newLocker(t, b, "lease", locker.WithLease(100*time.Millisecond))
	if err := lease.Lock(); err != nil {
		t.Fatalf("Lock() = %v", err)
	}
	forced := newLocker(t, m, "forced")
	if err := forced.Lock(); err != nil {
		t.Fatalf("Lock() = %v", err)
	}
	if _, err := m.ForceUnlock(context.Background(), "forced"); err != nil {
		t.Fatalf("ForceUnlock() = %v", err)
	}
	await(t, lease.(locker.Lease).Lost(), "end of the lease")
	await(t, forced.(locker.Lease).Lost(), "forced loss")
	for _, l := range []locker.Locker{lease, forced} {
		if err := l.Unlock(); !errors.Is(err, locker.ErrLockLost) {
			t.Errorf("Unlock() = %v; want ErrLockLost", err)
		}
	}
	got := r.gather(t)
	checkFamily(t, got, "orthrus_lock_lost_total", map[string]float64{
		`orthrus_lock_lost_total{cause="lease_end",engine="redis-b"}`: 1,
		`orthrus_lock_lost_total{cause="engine",engine="mem"}`:        1,
	})
	checkFamily(t, got, "orthrus_lock_holds", map[string]float64{
		`orthrus_lock_holds{engine="redis-b"}`: 0,
		`orthrus_lock_holds{engine="mem"}`:     0,
	})
	if t.Failed() {
		t.Logf("gathered:\n%s", dump(got))
	}
}

// checkDocs finds every series the dashboard and the alert rules in docs/
// query among those gathered after a failover: a renamed metric breaks
// them.
func checkDocs(t *testing.T, got map[string]float64) {
	t.Helper()
	name := regexp.MustCompile(`orthrus_[a-z_]+`)
	for _, doc := range []string{"../docs/grafana-dashboard.json", "../docs/prometheus-alerts.yaml"} {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		names := name.FindAllString(string(b), -1)
		if len(names) < 5 {
			t.Errorf("%s names %d metrics; want the dashboard's or the rules'", doc, len(names))
		}
		for _, n := range names {
			if strings.HasPrefix(n, "orthrus_idem_") || strings.HasPrefix(n, "orthrus_elect_") || strings.HasPrefix(n, "orthrus_runonce_") {
				continue // the gate's and the jobs': TestIdemMetrics, TestElectMetrics and TestRunOnceMetrics check them
			}
			found := false
			for k := range got {
				found = found || strings.HasPrefix(k, n+"{") || strings.HasPrefix(k, n+"_count{") // a histogram by its name
			}
			if !found {
				t.Errorf("%s queries %s, which the telemetry does not export", doc, n)
			}
		}
	}
}
