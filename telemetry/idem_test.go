package telemetry_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/orthrus-go/orthrus/idem"
	"github.com/orthrus-go/orthrus/internal/testserver"
	"github.com/orthrus-go/orthrus/locker"
)

func idemGate(t *testing.T, r *rig, addr string, opts ...idem.Option) *idem.Gate {
	t.Helper()
	o, err := r.Idem()
	if err != nil {
		t.Fatalf("Idem() = %v", err)
	}
	c := goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	s, err := idem.NewRedisStore(c, idem.WithPrefix("telemetry:"+t.Name()))
	if err != nil {
		t.Fatal(err)
	}
	opts = append([]idem.Option{idem.WithObserver(o), idem.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))}, opts...)
	g, err := idem.New(t.Name(), s, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	return g
}

// Every Begin outcome is counted by outcome and store, each round trip
// timed, each Begin a span; an outcome kept while the store is paused is
// pending until it is written.
func TestIdemMetrics(t *testing.T) {
	ctx := context.Background()
	r := newRig(t)
	g := idemGate(t, r, redisA)
	fp := idem.WithFingerprint([]byte("a"))
	tk, _, err := g.Begin(ctx, "op", fp) // ran
	if err != nil || tk == nil {
		t.Fatalf("Begin = %v, %v", tk, err)
	}
	if _, dup, _ := g.Begin(ctx, "op", fp); dup == nil || dup.State != idem.Running { // conflict, from this process's memory
		t.Fatalf("Begin = %+v; want a running duplicate", dup)
	}
	if err := tk.Done(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if _, dup, _ := g.Begin(ctx, "op", fp); dup == nil || dup.State != idem.Succeeded { // replayed
		t.Fatalf("Begin = %+v; want a succeeded duplicate", dup)
	}
	if _, dup, _ := g.Begin(ctx, "op", idem.WithFingerprint([]byte("b"))); dup == nil || !dup.Mismatch { // mismatch
		t.Fatalf("Begin = %+v; want a mismatch", dup)
	}
	off := idemGate(t, r, redisA, idem.WithDisabled(true))
	if tk, _, _ := off.Begin(ctx, "op"); tk == nil || !tk.Unguarded() { // unguarded
		t.Fatalf("disabled Begin = %v; want unguarded", tk)
	}

	got := r.gather(t)
	checkFamily(t, got, "orthrus_idem_begins_total", map[string]float64{
		`orthrus_idem_begins_total{outcome="ran",store="redis"}`:      1,
		`orthrus_idem_begins_total{outcome="conflict",store="local"}`: 1,
		`orthrus_idem_begins_total{outcome="replayed",store="redis"}`: 1,
		`orthrus_idem_begins_total{outcome="mismatch",store="redis"}`: 1,
		`orthrus_idem_begins_total{outcome="unguarded",store=""}`:     1,
	})
	checkFamily(t, got, "orthrus_idem_store_duration_seconds_count", map[string]float64{
		`orthrus_idem_store_duration_seconds_count{op="create",result="ok",store="redis"}`:  3,
		`orthrus_idem_store_duration_seconds_count{op="replace",result="ok",store="redis"}`: 1,
	})
	spans := 0
	for _, s := range r.spans.Ended() {
		if s.Name() == "idem.Begin" {
			spans++
		}
	}
	if spans != 5 {
		t.Errorf("%d idem.Begin spans; want 5\n%s", spans, dump(got))
	}

	// Refused, then pending while the store is paused.
	srv := testserver.Redis(t)
	down := idemGate(t, r, srv.Addr(), idem.WithRequestTimeout(200*time.Millisecond))
	tk, _, err = down.Begin(ctx, "paused")
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Resume() })
	if _, _, err := down.Begin(ctx, "other"); !errors.Is(err, locker.ErrUnavailable) {
		t.Fatalf("Begin on a paused store = %v; want ErrUnavailable", err)
	}
	if err := tk.Done(ctx, nil); !errors.Is(err, idem.ErrPending) {
		t.Fatalf("Done on a paused store = %v; want ErrPending", err)
	}
	got = r.gather(t)
	// The outcome, and the clean-up of the refused Begin's record (the
	// paused server applies the write when it resumes).
	if v := got[`orthrus_idem_pending{store="redis"}`]; v != 2 {
		t.Errorf("pending = %v; want 2\n%s", v, dump(got))
	}
	if v := got[`orthrus_idem_begins_total{outcome="refused",store="redis"}`]; v != 1 {
		t.Errorf("refused = %v; want 1\n%s", v, dump(got))
	}
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for down.Pending() > 0 { // nothing announces the write but the gauge itself
		if time.Now().After(deadline) {
			t.Fatal("outcome still pending 15s after the store resumed")
		}
		time.Sleep(20 * time.Millisecond)
	}
	got = r.gather(t)
	if v := got[`orthrus_idem_pending{store="redis"}`]; v != 0 {
		t.Errorf("pending after the write = %v; want 0", v)
	}
	checkIdemDocs(t, got)
}

// checkIdemDocs checks that the dashboard and the alerts query only gate
// metrics the telemetry exports.
func checkIdemDocs(t *testing.T, got map[string]float64) {
	t.Helper()
	name := regexp.MustCompile(`orthrus_idem_[a-z_]+`)
	for _, doc := range []string{"../docs/grafana-dashboard.json", "../docs/prometheus-alerts.yaml"} {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		names := name.FindAllString(string(b), -1)
		if len(names) < 2 {
			t.Errorf("%s names %d gate metrics; want a row of them", doc, len(names))
		}
		for _, n := range names {
			found := false
			for k := range got {
				found = found || strings.HasPrefix(k, n+"{")
			}
			if !found {
				t.Errorf("%s queries %s, which the telemetry does not export", doc, n)
			}
		}
	}
}
