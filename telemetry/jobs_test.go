package telemetry_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/elect"
	"github.com/orthrus-go/orthrus/engines/mem"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/runonce"
	"github.com/orthrus-go/orthrus/telemetry"
)

// hosts are two processes on one simulated server, named host-a and
// host-b: their names are the engine label.
func hosts(t *testing.T) (a, b *mem.Engine) {
	t.Helper()
	st, err := mem.NewStore()
	if err != nil {
		t.Fatal(err)
	}
	for i, name := range []string{"host-a", "host-b"} {
		e, err := mem.New(mem.WithStore(st), mem.WithName(name))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.Close() })
		if i == 0 {
			a = e
		} else {
			b = e
		}
	}
	return a, b
}

func jobObserver(t *testing.T, r *rig) *telemetry.JobObserver {
	t.Helper()
	o, err := r.Jobs()
	if err != nil {
		t.Fatalf("Jobs() = %v", err)
	}
	return o
}

// Every campaign is timed by result, every leadership counted when won
// and when it ends, by end; the leaderships held now return to 0.
func TestElectMetrics(t *testing.T) {
	r := newRig(t)
	obs := jobObserver(t, r)
	hostA, hostB := hosts(t)
	ctx := context.Background()
	a, err := elect.New(hostA, "leader", elect.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	b, err := elect.New(hostB, "leader", elect.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}

	if _, err := a.Campaign(ctx); err != nil { // won
		t.Fatal(err)
	}
	if _, err := a.Campaign(ctx); !errors.Is(err, locker.ErrInvalidArgument) { // error: a already leads
		t.Fatalf("second Campaign() = %v; want ErrInvalidArgument", err)
	}
	wait, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := b.Campaign(wait); !errors.Is(err, context.DeadlineExceeded) { // cancelled
		t.Fatalf("Campaign() while a leads = %v; want DeadlineExceeded", err)
	}
	if err := a.Resign(); err != nil { // resigned
		t.Fatal(err)
	}
	lctx, err := b.Campaign(ctx) // won
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hostA.ForceUnlock(ctx, "leader"); err != nil {
		t.Fatal(err)
	}
	<-lctx.Done()                                               // lost
	if err := b.Resign(); !errors.Is(err, locker.ErrLockLost) { // returns once the loss is reported
		t.Errorf("Resign() after the loss = %v; want ErrLockLost", err)
	}

	got := checkJobMetrics(t, r, "orthrus_elect_", map[string]map[string]float64{
		"orthrus_elect_terms_total": {
			`orthrus_elect_terms_total{engine="host-a"}`: 1,
			`orthrus_elect_terms_total{engine="host-b"}`: 1,
		},
		"orthrus_elect_campaign_duration_seconds_count": {
			`orthrus_elect_campaign_duration_seconds_count{engine="host-a",result="won"}`:       1,
			`orthrus_elect_campaign_duration_seconds_count{engine="host-a",result="error"}`:     1,
			`orthrus_elect_campaign_duration_seconds_count{engine="host-b",result="cancelled"}`: 1,
			`orthrus_elect_campaign_duration_seconds_count{engine="host-b",result="won"}`:       1,
		},
		"orthrus_elect_term_duration_seconds_count": {
			`orthrus_elect_term_duration_seconds_count{end="resigned",engine="host-a"}`: 1,
			`orthrus_elect_term_duration_seconds_count{end="lost",engine="host-b"}`:     1,
		},
		"orthrus_elect_leading": {
			`orthrus_elect_leading{engine="host-a"}`: 0,
			`orthrus_elect_leading{engine="host-b"}`: 0,
		},
	})
	// The campaign's clock starts after the deadline was set, however
	// long the caller was descheduled in between (47.8ms of 50 beside a
	// CPU hog): half the wait at least.
	if v := got[`orthrus_elect_campaign_duration_seconds_sum{engine="host-b",result="cancelled"}`]; v < 0.025 {
		t.Errorf("cancelled campaign timed %vs; want most of its 50ms wait", v)
	}
}

// Every run is counted by outcome, and the runs that ran timed.
func TestRunOnceMetrics(t *testing.T) {
	r := newRig(t)
	obs := jobObserver(t, r)
	hostA, hostB := hosts(t)
	ctx := context.Background()
	ra, err := runonce.New(hostA, runonce.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	defer ra.Close()
	rb, err := runonce.New(hostB, runonce.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	defer rb.Close()

	if ran, err := ra.Run(ctx, "report", func(ctx context.Context) error { // ran
		ran, err := rb.Run(ctx, "report", func(context.Context) error { return nil }) // skipped
		if ran || err != nil {
			t.Errorf("Run() while the job runs elsewhere = %v, %v; want false, nil", ran, err)
		}
		return nil
	}); !ran || err != nil {
		t.Errorf("Run() = %v, %v; want true, nil", ran, err)
	}
	errJob := errors.New("job failed")
	if _, err := ra.Run(ctx, "report", func(context.Context) error { return errJob }); !errors.Is(err, errJob) { // failed
		t.Errorf("Run() = %v; want the job's error", err)
	}
	if _, err := ra.Run(ctx, "report", func(ctx context.Context) error { // cut_short
		<-ctx.Done()
		return nil
	}, runonce.AtMostFor(50*time.Millisecond)); !errors.Is(err, locker.ErrLockLost) {
		t.Errorf("Run() past AtMostFor = %v; want ErrLockLost", err)
	}
	if _, err := rb.Run(ctx, "report", nil); !errors.Is(err, locker.ErrInvalidArgument) { // error
		t.Errorf("Run(nil) = %v; want ErrInvalidArgument", err)
	}

	got := checkJobMetrics(t, r, "orthrus_runonce_", map[string]map[string]float64{
		"orthrus_runonce_runs_total": {
			`orthrus_runonce_runs_total{engine="host-a",outcome="ran"}`:       1,
			`orthrus_runonce_runs_total{engine="host-a",outcome="failed"}`:    1,
			`orthrus_runonce_runs_total{engine="host-a",outcome="cut_short"}`: 1,
			`orthrus_runonce_runs_total{engine="host-b",outcome="skipped"}`:   1,
			`orthrus_runonce_runs_total{engine="host-b",outcome="error"}`:     1,
		},
		"orthrus_runonce_run_duration_seconds_count": {
			`orthrus_runonce_run_duration_seconds_count{engine="host-a",outcome="ran"}`:       1,
			`orthrus_runonce_run_duration_seconds_count{engine="host-a",outcome="failed"}`:    1,
			`orthrus_runonce_run_duration_seconds_count{engine="host-a",outcome="cut_short"}`: 1,
		},
	})
	// The run is timed from its grant, the lease from before the request
	// (runonce.AtLeastFor's doc): less than AtMostFor by a round trip,
	// which a CPU hog makes milliseconds.
	if v := got[`orthrus_runonce_run_duration_seconds_sum{engine="host-a",outcome="cut_short"}`]; v < 0.025 {
		t.Errorf("run cut short timed %vs; want most of AtMostFor (50ms)", v)
	}
}

// Election and job names are labels only as WithLockNames maps them.
func TestJobMetricsNames(t *testing.T) {
	r := newRig(t, telemetry.WithLockNames(func(name string) string {
		kind, _, _ := strings.Cut(name, "/")
		return kind
	}))
	hostA, _ := hosts(t)
	rn, err := runonce.New(hostA, runonce.WithObserver(jobObserver(t, r)))
	if err != nil {
		t.Fatal(err)
	}
	defer rn.Close()
	for _, job := range []string{"report/monday", "report/tuesday"} {
		if ran, err := rn.Run(context.Background(), job, func(context.Context) error { return nil }); !ran || err != nil {
			t.Fatalf("Run(%q) = %v, %v", job, ran, err)
		}
	}
	checkFamily(t, r.gather(t), "orthrus_runonce_runs_total", map[string]float64{
		`orthrus_runonce_runs_total{engine="host-a",name="report",outcome="ran"}`: 2,
	})
}
