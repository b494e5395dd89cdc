package runonce_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/orthrus-go/orthrus/runonce"
)

// skewed is the real clock off by offset, as a host whose clock is wrong:
// its time of day differs, its elapsed times do not.
type skewed struct {
	clockwork.Clock
	offset time.Duration
}

func (c skewed) Now() time.Time                  { return c.Clock.Now().Add(c.offset) }
func (c skewed) Since(t time.Time) time.Duration { return c.Now().Sub(t) }
func (c skewed) Until(t time.Time) time.Duration { return t.Sub(c.Now()) }

// tickSeconds is how long TestTicks runs per engine: 10s, or
// ORTHRUS_RUNONCE_SECONDS (the target is 60).
func tickSeconds(t *testing.T) int {
	if s := os.Getenv("ORTHRUS_RUNONCE_SECONDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			t.Fatalf("ORTHRUS_RUNONCE_SECONDS=%q: want a positive number", s)
		}
		return n
	}
	return 10
}

// tally counts, per tick, the processes that fired it and the runs.
type tally struct {
	mu    sync.Mutex
	fired map[int64]int
	runs  map[int64]int
}

// fleet runs a 10ms job every second on three processes whose clocks
// disagree by up to 2s, each tick under the job's name plus the tick's
// scheduled second, until ctx ends.
func fleet(ctx context.Context, t *testing.T, newEngine process, atLeast time.Duration) *tally {
	tl := &tally{fired: map[int64]int{}, runs: map[int64]int{}}
	var wg sync.WaitGroup
	for _, offset := range []time.Duration{0, 900 * time.Millisecond, 2 * time.Second} {
		clock := skewed{Clock: clockwork.NewRealClock(), offset: offset}
		r := newRunner(t, newEngine(t), runonce.WithClock(clock), runonce.AtMostFor(10*time.Second), runonce.AtLeastFor(atLeast))
		wg.Add(1)
		go func() {
			defer wg.Done()
			tl.schedule(ctx, t, r, clock)
		}()
	}
	wg.Wait()
	return tl
}

// schedule fires the job at each whole second of clock until ctx ends.
func (tl *tally) schedule(ctx context.Context, t *testing.T, r *runonce.Runner, clock clockwork.Clock) {
	for {
		next := clock.Now().Truncate(time.Second).Add(time.Second)
		select {
		case <-ctx.Done():
			return
		case <-clock.After(clock.Until(next)):
		}
		tick := next.Unix()
		tl.mu.Lock()
		tl.fired[tick]++
		tl.mu.Unlock()
		_, err := r.Run(ctx, fmt.Sprintf("%s/report/%d", t.Name(), tick), func(context.Context) error {
			tl.mu.Lock()
			tl.runs[tick]++
			tl.mu.Unlock()
			time.Sleep(10 * time.Millisecond) // the job's work
			return nil
		})
		switch {
		case err != nil && ctx.Err() != nil:
			// The test's end cut this firing short: it says nothing of
			// the tick.
			tl.mu.Lock()
			if tl.fired[tick]--; tl.fired[tick] == 0 && tl.runs[tick] == 0 {
				delete(tl.fired, tick)
			}
			tl.mu.Unlock()
		case err != nil:
			t.Errorf("Run(tick %d) = %v", tick, err)
		}
	}
}

// Three processes with clocks 0, +0.9s and +2s off run a 10ms job every
// second: every tick runs exactly once, on every engine and through the
// switcher.
func TestTicks(t *testing.T) {
	secs := tickSeconds(t)
	for name, p := range processes(t) {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Duration(secs)*time.Second)
			defer cancel()
			tl := fleet(ctx, t, p, 3*time.Second)
			var once, all int
			for tick, fired := range tl.fired {
				runs := tl.runs[tick]
				if runs != 1 {
					t.Errorf("tick %d fired on %d processes ran %d times; want once", tick, fired, runs)
				} else {
					once++
				}
				if fired == 3 {
					all++
				}
			}
			t.Logf("%d ticks, each run once (%d fired on all three processes)", once, all)
			if all < secs-4 {
				t.Errorf("%d ticks fired on all three processes in %ds; want at least %d", all, secs, secs-4)
			}
		})
	}
}

// Without AtLeastFor the same fleet runs ticks twice: the check above
// sees what it is meant to.
func TestTicksWithoutAtLeastForRunTwice(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	tl := fleet(ctx, t, processes(t)["mem"], 0)
	twice := 0
	for _, runs := range tl.runs {
		if runs > 1 {
			twice++
		}
	}
	if twice == 0 {
		t.Errorf("no tick ran twice without AtLeastFor; want the skew to show")
	}
}

// helperEnv names the engine a runner process the test kills runs on.
const helperEnv = "ORTHRUS_RUNONCE_HELPER"

// TestHelperRunner is the process TestKilledRunner kills: it starts a job
// that never ends, says so, and waits to be killed.
func TestHelperRunner(t *testing.T) {
	kind := os.Getenv(helperEnv)
	if kind == "" {
		t.Skip("run by TestKilledRunner")
	}
	servers.Redis, servers.Etcd = os.Getenv("REDIS_ADDR"), os.Getenv("ETCD_ADDR")
	atMost, _ := time.ParseDuration(os.Getenv("AT_MOST"))
	r := newRunner(t, processes(t)[kind](t), runonce.AtMostFor(atMost))
	_, err := r.Run(context.Background(), os.Getenv("JOB"), func(ctx context.Context) error {
		fmt.Println("running")
		<-ctx.Done() // killed first
		return nil
	})
	t.Fatalf("Run() returned %v before the process was killed", err)
}

// A runner killed mid-job leaves its name held until AtMostFor, then
// free: within a second on Redis; on etcd, whose fixed lease is AtMostFor
// rounded up to whole seconds plus a second (engines/etcd), within two.
func TestKilledRunner(t *testing.T) {
	const atMost = 3 * time.Second
	for kind, slack := range map[string]time.Duration{"redis": time.Second, "etcd": 2 * time.Second} {
		t.Run(kind, func(t *testing.T) {
			job := t.Name() + "/" + strconv.FormatInt(time.Now().UnixNano(), 36)
			cmd := exec.Command(os.Args[0], "-test.run=^TestHelperRunner$")
			cmd.Env = append(os.Environ(), helperEnv+"="+kind, "REDIS_ADDR="+servers.Redis, "ETCD_ADDR="+servers.Etcd,
				"AT_MOST="+atMost.String(), "JOB="+job)
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			if line, err := bufio.NewReader(out).ReadString('\n'); line != "running\n" {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
				t.Fatalf("runner process said %q, %v; want running", line, err)
			}
			started := time.Now() // after the grant
			if err := cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			_ = cmd.Wait()

			e := processes(t)[kind](t)
			r := newRunner(t, e)
			if ran, err := r.Run(context.Background(), job, nop); ran || err != nil {
				t.Errorf("Run() right after the kill = %v, %v; want false, nil (held until AtMostFor)", ran, err)
			}
			l, err := e.NewLocker(job)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), atMost+5*time.Second)
			defer cancel()
			if err := l.LockCtx(ctx); err != nil {
				t.Fatalf("LockCtx() = %v; want the name free after AtMostFor", err)
			}
			free := time.Since(started)
			_ = l.Unlock()
			t.Logf("name free %v after the grant seen by the killed runner (AtMostFor %v)", free, atMost)
			if free > atMost+slack {
				t.Errorf("name free %v after the grant; want within AtMostFor (%v) + %v", free, atMost, slack)
			}
		})
	}
}
