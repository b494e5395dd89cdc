package lockertest

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/runonce"
)

// RunOnce runs the conformance suite of package runonce on the engines
// factory makes, each one process of a fleet: a run while another
// process (or another run of the same Runner) holds the name skips at
// once; AtLeastFor keeps the name held after a fast job, and Close
// releases it at the window's end; AtMostFor ends a run that goes on,
// with ErrLockLost, and frees the name; AssertHeld accepts a live run's
// context only.
func RunOnce(t *testing.T, factory Factory) {
	runCases(t, factory, []suiteCase{
		{"Skips", testRunOnceSkips},
		{"AtLeastFor", testRunOnceAtLeastFor},
		{"AtMostFor", testRunOnceAtMostFor},
	})
}

// runSlack is how much later than asked a run may end or a name be
// released: a round trip to a loaded server, and an etcd lease, which is
// rounded up to whole seconds plus one and expired by the server's
// periodic check.
const runSlack = 4 * time.Second

var quietLog = slog.New(slog.NewTextHandler(io.Discard, nil))

// newRunner returns a Runner on e, closed (before e) when the test ends.
func newRunner(t *testing.T, e locker.Engine, opts ...runonce.Option) *runonce.Runner {
	t.Helper()
	r, err := runonce.New(e, append([]runonce.Option{runonce.WithLogger(quietLog)}, opts...)...)
	if err != nil {
		t.Fatalf("runonce.New() = %v", err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r
}

// run is a Run on its own goroutine; its result comes on the channel.
type runResult struct {
	ran bool
	err error
}

func runAsync(ctx context.Context, r *runonce.Runner, name string, fn func(context.Context) error) <-chan runResult {
	done := make(chan runResult, 1)
	go func() {
		ran, err := r.Run(ctx, name, fn)
		done <- runResult{ran, err}
	}()
	return done
}

// wantSkip runs name on r while another owner holds it: Run must return
// (false, nil) at once, without running the job.
func wantSkip(t *testing.T, r *runonce.Runner, name, what string) {
	t.Helper()
	ran := make(chan struct{}, 1)
	done := runAsync(context.Background(), r, name, func(context.Context) error {
		ran <- struct{}{}
		return nil
	})
	select {
	case res := <-done:
		if res.ran || res.err != nil {
			t.Errorf("%s: Run() = %v, %v; want false, nil", what, res.ran, res.err)
		}
	case <-time.After(runSlack):
		t.Fatalf("%s: Run() still waiting after %v; want a skip, at once", what, runSlack)
	}
	if len(ran) > 0 {
		t.Errorf("%s: the job ran while another owner held its name", what)
	}
}

// A run while another process holds the name skips at once, as does a
// second run of the same Runner; the job's context passes AssertHeld
// while it runs, not once it has returned; the name is free when the job
// returns.
func testRunOnceSkips(t *testing.T, f Factory) {
	a, b := newRunner(t, open(t, f).Engine), newRunner(t, open(t, f).Engine)
	name := lockName(t, "job")
	started, finish := make(chan context.Context, 1), make(chan struct{})
	done := runAsync(context.Background(), a, name, func(ctx context.Context) error {
		if err := runonce.AssertHeld(ctx); err != nil {
			t.Errorf("AssertHeld() in the run = %v; want nil", err)
		}
		started <- ctx
		<-finish
		return nil
	})
	var runCtx context.Context
	select {
	case runCtx = <-started:
	case res := <-done:
		t.Fatalf("Run() on a free name = %v, %v; want the job to run", res.ran, res.err)
	}
	wantSkip(t, b, name, "another process")
	wantSkip(t, a, name, "another run of the same Runner")
	close(finish)
	if res := <-done; !res.ran || res.err != nil {
		t.Errorf("Run() = %v, %v; want true, nil", res.ran, res.err)
	}
	if err := runonce.AssertHeld(runCtx); !errors.Is(err, runonce.ErrNotLocked) {
		t.Errorf("AssertHeld() on the context of a run that ended = %v; want ErrNotLocked", err)
	}
	if err := runonce.AssertHeld(context.Background()); !errors.Is(err, runonce.ErrNotLocked) || !errors.Is(err, locker.ErrNotHeld) {
		t.Errorf("AssertHeld() outside a run = %v; want ErrNotLocked wrapping ErrNotHeld", err)
	}
	if ran, err := b.Run(context.Background(), name, func(context.Context) error { return nil }); !ran || err != nil {
		t.Errorf("Run() once the job returned = %v, %v; want true, nil (the name is free)", ran, err)
	}
}

// A fast job keeps its name for AtLeastFor after the grant: another
// process skips it meanwhile; Close waits for the window, releases the
// name, and the other process runs the job then.
func testRunOnceAtLeastFor(t *testing.T, f Factory) {
	const window = time.Second
	a, b := newRunner(t, open(t, f).Engine, runonce.AtLeastFor(window)), newRunner(t, open(t, f).Engine)
	name := lockName(t, "job")
	begin := time.Now() // before the grant, which starts the window
	var jobAt time.Time
	ran, err := a.Run(context.Background(), name, func(context.Context) error { jobAt = time.Now(); return nil })
	if !ran || err != nil {
		t.Fatalf("Run() = %v, %v; want true, nil", ran, err)
	}
	returned := time.Since(begin)
	// b's attempt may come after the window on a loaded machine: then a
	// run proves nothing, but a run inside the window is a failure.
	ranB, err := b.Run(context.Background(), name, func(context.Context) error {
		if d := time.Since(jobAt); d < window {
			t.Errorf("another process ran the job %v after it ran; want a skip for AtLeastFor (%v)", d, window)
		}
		return nil
	})
	switch {
	case err != nil:
		t.Errorf("Run() in the window = %v", err)
	case ranB:
		if !t.Failed() {
			t.Logf("another process's attempt came %v after the job: too late to check the window", time.Since(jobAt))
		}
		return
	}
	if err := a.Close(); err != nil {
		t.Errorf("Close() = %v", err)
	}
	released := time.Since(begin)
	t.Logf("Run() returned after %v, Close() released the name %v after the run began (AtLeastFor %v)", returned, released, window)
	if released < window || released > window+runSlack {
		t.Errorf("name released %v after the run began; want AtLeastFor (%v) to %v", released, window, window+runSlack)
	}
	if ran, err := b.Run(context.Background(), name, func(context.Context) error { return nil }); !ran || err != nil {
		t.Errorf("Run() after the window = %v, %v; want true, nil", ran, err)
	}
}

// A job that runs past AtMostFor loses the name: its context ends with
// ErrLockLost, which AssertHeld reports too, Run returns it, and another
// process may run the job as soon as the engine has let the name go: at
// once on a quiet machine; ZooKeeper, whose node the engine deletes when
// the lease ends, took longer beside a CPU hog.
func testRunOnceAtMostFor(t *testing.T, f Factory) {
	e := open(t, f).Engine
	atMost := shortTTL(time.Second, e)
	a, b := newRunner(t, e, runonce.AtMostFor(atMost)), newRunner(t, open(t, f).Engine)
	name := lockName(t, "long")
	begin := time.Now()
	ran, err := a.Run(context.Background(), name, func(ctx context.Context) error {
		<-ctx.Done()
		if err := runonce.AssertHeld(ctx); !errors.Is(err, locker.ErrLockLost) {
			t.Errorf("AssertHeld() after the loss = %v; want ErrLockLost", err)
		}
		return context.Cause(ctx)
	})
	took := time.Since(begin)
	if !ran || !errors.Is(err, locker.ErrLockLost) {
		t.Errorf("Run() past AtMostFor = %v, %v; want true, ErrLockLost", ran, err)
	}
	t.Logf("run cut short %v after it began (AtMostFor %v)", took, atMost)
	if took < atMost || took > atMost+runSlack {
		t.Errorf("run cut short %v after it began; want AtMostFor (%v) to %v", took, atMost, atMost+runSlack)
	}
	eventually(t, runSlack, "another process's Run after AtMostFor", func() bool {
		ran, err := b.Run(context.Background(), name, func(context.Context) error { return nil })
		if err != nil {
			t.Fatalf("Run() after AtMostFor = %v, %v; want true, nil (the name is free)", ran, err)
		}
		return ran
	})
}
