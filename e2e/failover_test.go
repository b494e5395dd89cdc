package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/orthrus-go/orthrus/config"
	"github.com/orthrus-go/orthrus/internal/testserver"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/switcher"
)

// The failover measurements: what callers see when the primary is killed
// or paused, with library defaults (config.Open), for one process and for
// a fleet of processes sharing an etcd switch key.
//
//	go test -run '^$' -bench Failover -benchtime 5x ./e2e/

// engineYAML is the config entry of one engine of kind on addrs (for
// postgres, a DSN; for redlock, its nodes: see addresses).
func engineYAML(kind string, addrs ...string) string {
	switch kind {
	case "postgres":
		return fmt.Sprintf("  - {name: %s, type: %s, dsn: %q}\n", kind, kind, addrs[0])
	case "redlock":
		return fmt.Sprintf("  - {name: %s, type: %s, addrs: [%s]}\n", kind, kind, strings.Join(quoted(addrs), ", "))
	}
	field := map[string]string{"redis": "addrs", "etcd": "endpoints", "zk": "servers"}[kind]
	return fmt.Sprintf("  - {name: %s, type: %s, %s: [%q]}\n", kind, kind, field, addrs[0])
}

func quoted(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = strconv.Quote(s)
	}
	return out
}

func startServer(tb testing.TB, kind string) *testserver.Server {
	switch kind {
	case "redis":
		return testserver.Redis(tb)
	case "etcd":
		return testserver.Etcd(tb)
	case "postgres":
		return testserver.Postgres(tb)
	default:
		return testserver.ZooKeeper(tb)
	}
}

// startServers starts the servers of one engine of kind: three
// independent redis-servers for redlock, one server otherwise.
func startServers(tb testing.TB, kind string) []*testserver.Server {
	if kind != "redlock" {
		return []*testserver.Server{startServer(tb, kind)}
	}
	return []*testserver.Server{testserver.Redis(tb), testserver.Redis(tb), testserver.Redis(tb)}
}

// addresses are what engineYAML takes for ss, the servers of kind.
func addresses(kind string, ss []*testserver.Server) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = s.Addr()
		if kind == "postgres" {
			out[i] = s.DSN()
		}
	}
	return out
}

func injure(s *testserver.Server, fault string) error {
	if fault == "kill" {
		return s.Kill()
	}
	return s.Pause()
}

// failoverSample is one fault as a single process's callers saw it.
type failoverSample struct {
	switched, firstGrant time.Duration // after the fault
	errors               int
}

// failoverOnce runs load through a switcher over a fresh primary of kind
// and a secondary, injures the primary, and measures.
func failoverOnce(tb testing.TB, kind, fault string, secondary *testserver.Server, secondaryKind string) failoverSample {
	primary := startServers(tb, kind)
	tb.Cleanup(func() {
		for _, s := range primary {
			_ = s.Resume()
		}
	})
	path := filepath.Join(tb.TempDir(), "failover.yaml")
	yaml := "engines:\n" + engineYAML(kind, addresses(kind, primary)...) + engineYAML(secondaryKind, addresses(secondaryKind, []*testserver.Server{secondary})...)
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		tb.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		tb.Fatal(err)
	}
	switched := make(chan time.Time, 8)
	sw, err := config.Open(context.Background(), cfg, config.WithSwitcherOptions(switcher.OnSwitch(func(ev switcher.Event) {
		if ev.Reason != switcher.ReasonDeferred {
			switched <- ev.At
		}
	})))
	if err != nil {
		tb.Fatal(err)
	}
	defer sw.Close()

	var (
		mu         sync.Mutex
		faultAt    time.Time
		firstGrant time.Time
		errs       int
		stop       = make(chan struct{})
		wg         sync.WaitGroup
	)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				l, _ := sw.NewLocker(fmt.Sprintf("failover-%d", (w+i)%8), locker.WithTTL(3*time.Second))
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				err := l.LockCtx(ctx)
				cancel()
				now := time.Now()
				mu.Lock()
				if err != nil {
					errs++
					tb.Logf("caller error: %v", err)
				} else if l.Engine() == secondaryKind && !faultAt.IsZero() && firstGrant.IsZero() {
					firstGrant = now
				}
				mu.Unlock()
				if err == nil {
					_ = l.Unlock() // a hold on the injured primary may fail to unlock
				}
			}
		}()
	}
	time.Sleep(300 * time.Millisecond) // load on the primary before the fault
	mu.Lock()
	faultAt = time.Now()
	mu.Unlock()
	for _, s := range primary[:len(primary)/2+1] { // a majority of redlock's nodes
		if err := injure(s, fault); err != nil {
			tb.Fatal(err)
		}
	}
	var s failoverSample
	select {
	case at := <-switched:
		s.switched = at.Sub(faultAt)
	case <-time.After(10 * time.Second):
		tb.Fatalf("%s %s: no switch within 10s", fault, kind)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		g := firstGrant
		mu.Unlock()
		if !g.IsZero() {
			s.firstGrant = g.Sub(faultAt)
			break
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%s %s: no grant on the secondary within 5s of the switch", fault, kind)
		}
		time.Sleep(time.Millisecond)
	}
	close(stop)
	wg.Wait()
	s.errors = errs
	return s
}

func BenchmarkFailover(b *testing.B) {
	for _, kind := range []string{"redis", "etcd", "zk", "postgres", "redlock"} {
		secondaryKind := "redis"
		if kind == "redis" {
			secondaryKind = "etcd"
		}
		for _, fault := range []string{"kill", "pause"} {
			b.Run(kind+"/"+fault, func(b *testing.B) {
				secondary := startServer(b, secondaryKind)
				var switched, granted []time.Duration
				errs := 0
				for range b.N {
					s := failoverOnce(b, kind, fault, secondary, secondaryKind)
					switched, granted = append(switched, s.switched), append(granted, s.firstGrant)
					errs += s.errors
				}
				b.ReportMetric(ms(median(switched)), "switch-ms")
				b.ReportMetric(ms(median(granted)), "grant-ms")
				b.ReportMetric(float64(errs), "errors")
				b.Logf("%s %s -> %s, n=%d: switch %s; first grant on the secondary %s; caller errors %d",
					fault, kind, secondaryKind, b.N, spread(switched), spread(granted), errs)
			})
		}
	}
	for _, fault := range []string{"kill", "pause"} {
		b.Run("fleet3/redis/"+fault, func(b *testing.B) {
			var results []fleetResult
			for range b.N {
				results = append(results, fleetFailover(b, fault, 3))
			}
			pick := func(f func(fleetResult) time.Duration) []time.Duration {
				var out []time.Duration
				for _, r := range results {
					out = append(out, f(r))
				}
				return out
			}
			sp := pick(func(r fleetResult) time.Duration { return r.spread })
			split := pick(func(r fleetResult) time.Duration { return r.split })
			fenced := pick(func(r fleetResult) time.Duration { return r.fencedOut })
			first := pick(func(r fleetResult) time.Duration { return r.firstSwitch })
			b.ReportMetric(ms(median(first)), "switch-ms")
			b.ReportMetric(ms(median(sp)), "spread-ms")
			b.ReportMetric(ms(median(split)), "split-ms")
			b.ReportMetric(ms(median(fenced)), "fenced-out-ms")
			errs, epochs := 0, true
			for _, r := range results {
				errs += r.errors
				epochs = epochs && r.equalEpochs
			}
			b.ReportMetric(float64(errs), "errors")
			b.Logf("fleet of 3, %s redis -> etcd, n=%d: first switch %s; spread %s; split %s; longest fenced-out %s; caller errors %d; equal epochs %v",
				fault, b.N, spread(first), spread(sp), spread(split), spread(fenced), errs, epochs)
		})
	}
}

// Three processes share an etcd switch key; the primary dies: they move
// together, with one epoch, no caller errors, and no process fenced out.
func TestFleetBreakerFailover(t *testing.T) {
	r := fleetFailover(t, "kill", 3)
	t.Logf("first switch %v after the kill, spread %v, split %v, longest fenced-out %v, caller errors %d",
		r.firstSwitch, r.spread, r.split, r.fencedOut, r.errors)
	if r.spread > 300*time.Millisecond {
		t.Errorf("spread between first and last switch %v; want <= 300ms", r.spread)
	}
	if r.split > time.Second {
		t.Errorf("fleet split for %v; want <= 1s", r.split)
	}
	if !r.equalEpochs {
		t.Error("epochs differ between processes after convergence")
	}
	if r.fencedOut > time.Second {
		t.Errorf("a process had its fenced writes refused for %v; want <= 1s", r.fencedOut)
	}
	if r.errors != 0 {
		t.Errorf("%d caller errors; want 0", r.errors)
	}
}

// fleetResult is one fault as a fleet saw it.
type fleetResult struct {
	firstSwitch time.Duration // fault to the first process's switch
	spread      time.Duration // first to last process's switch
	split       time.Duration // time the processes were not all on one engine
	fencedOut   time.Duration // longest run of refused fenced writes in one process
	equalEpochs bool
	errors      int
}

// fenceScript accepts a write whose token (a zero-padded decimal) is not
// below the highest accepted for the name, and logs the accepted ones.
var fenceScript = goredis.NewScript(`
local h = redis.call('GET', KEYS[1])
if h and ARGV[1] < h then return 0 end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('RPUSH', KEYS[1] .. ':log', ARGV[1])
return 1`)

// lost reports whether the hold is reported lost.
func lost(l locker.Lease) bool {
	select {
	case <-l.Lost():
		return true
	default:
		return false
	}
}

// lockBudget is the LockCtx deadline of a fleet worker's callers.
const lockBudget = 10 * time.Second

// fleetWorker is one process of fleetFailover: it runs load through a
// switcher opened from E2E_FLEET_CONFIG, writes each hold's token to
// the fenced resource at E2E_FENCE_ADDR, and reports on stdout until
// stdin closes.
func fleetWorker() int {
	cfg, err := config.Load(os.Getenv("E2E_FLEET_CONFIG"))
	if err != nil {
		fmt.Println("error", 0, err)
		return 1
	}
	var out sync.Mutex
	say := func(format string, args ...any) {
		out.Lock()
		defer out.Unlock()
		fmt.Printf(format+"\n", args...)
	}
	sw, err := config.Open(context.Background(), cfg, config.WithSwitcherOptions(switcher.OnSwitch(func(ev switcher.Event) {
		say("switch %d %s %d %s", ev.At.UnixNano(), ev.To, ev.Epoch, ev.Reason)
	})))
	if err != nil {
		fmt.Println("error", 0, err)
		return 1
	}
	defer sw.Close()
	fence := goredis.NewClient(&goredis.Options{Addr: os.Getenv("E2E_FENCE_ADDR")})
	defer fence.Close()
	stop := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(stop)
	}()
	say("ready %s %d", sw.Current(), sw.Epoch())
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				name := fmt.Sprintf("fleet-%d", rand.IntN(8))
				l, _ := sw.NewLocker(name, locker.WithTTL(3*time.Second))
				ctx, cancel := context.WithTimeout(context.Background(), lockBudget)
				began := time.Now()
				err := l.LockCtx(ctx)
				cancel()
				if err != nil {
					say("error %d %d %v", time.Now().UnixNano(), time.Since(began), err)
					continue
				}
				granted := time.Now()
				tok := fmt.Sprintf("%020d", l.Token())
				ok, err := fenceScript.Run(context.Background(), fence, []string{"fence:" + name}, tok).Int()
				if err == nil {
					say("write %d %d %s %s %s", time.Now().UnixNano(), ok, l.Engine(), name, tok)
				}
				time.Sleep(time.Millisecond) // the critical section
				// The hold's use ends before Unlock is sent: another owner
				// may be granted before Unlock returns.
				engine, used, lostBefore := l.Engine(), time.Now(), lost(l)
				_ = l.Unlock()
				say("hold %d %d %s %s %v", granted.UnixNano(), used.UnixNano(), engine, name, lostBefore)
			}
		}()
	}
	wg.Wait()
	return 0
}

// fleetFailover starts n processes on a Redis primary and an etcd
// secondary that also holds the switch key, injures the primary, lets the
// fleet run for three seconds and reads what each process reported.
func fleetFailover(tb testing.TB, fault string, n int) fleetResult {
	primary, secondary, resource := testserver.Redis(tb), testserver.Etcd(tb), testserver.Redis(tb)
	tb.Cleanup(func() { _ = primary.Resume() })
	cfg := fleetConfig(tb, primary.Addr(), secondary.Addr())
	configs := make([]string, n)
	for i := range configs {
		configs[i] = cfg
	}
	procs := startFleet(tb, configs, resource.Addr())
	time.Sleep(500 * time.Millisecond) // load on the primary before the fault
	faultAt := time.Now()
	if err := injure(primary, fault); err != nil {
		tb.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	return summarize(tb, stopFleet(procs), faultAt)
}

// fleetConfig writes the config of a fleet process: a Redis primary at
// redisAddr and an etcd secondary that also holds the switch key.
func fleetConfig(tb testing.TB, redisAddr, etcdAddr string) string {
	f, err := os.CreateTemp(tb.TempDir(), "fleet-*.yaml")
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	_, err = fmt.Fprintf(f, "active: redis\nengines:\n%s%ssource: {type: etcd, endpoints: [%q], key: %s}\n",
		engineYAML("redis", redisAddr), engineYAML("etcd", etcdAddr), etcdAddr, fleetKey)
	if err != nil {
		tb.Fatal(err)
	}
	return f.Name()
}

// fleetKey is the switch key of the fleet tests.
const fleetKey = "/e2e/failover/active"

// fleetProc is one worker process of a fleet.
type fleetProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	ready chan struct{}
	done  chan struct{}

	mu    sync.Mutex
	lines []string
}

// matches reports whether the process reported a line that match accepts
// so far.
func (p *fleetProc) matches(match func(string) bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.ContainsFunc(p.lines, match)
}

// startFleet starts one fleetWorker per config file, writing to the fenced
// resource at fence, and waits until every one is ready.
func startFleet(tb testing.TB, configs []string, fence string) []*fleetProc {
	procs := make([]*fleetProc, len(configs))
	for i, path := range configs {
		cmd := exec.Command(os.Args[0], "-test.run=^$", "-test.bench=^$")
		cmd.Env = append(os.Environ(), "E2E_FLEET_MEMBER=worker", "E2E_FLEET_CONFIG="+path, "E2E_FENCE_ADDR="+fence)
		cmd.Stderr = io.Discard
		stdin, _ := cmd.StdinPipe()
		stdout, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			tb.Fatal(err)
		}
		p := &fleetProc{cmd: cmd, stdin: stdin, ready: make(chan struct{}), done: make(chan struct{})}
		go func() {
			defer close(p.done)
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				if strings.HasPrefix(sc.Text(), "ready") {
					close(p.ready)
				}
				p.mu.Lock()
				p.lines = append(p.lines, sc.Text())
				p.mu.Unlock()
			}
			_ = cmd.Wait()
		}()
		procs[i] = p
		tb.Cleanup(func() { _ = stdin.Close(); <-p.done })
	}
	for i, p := range procs {
		select {
		case <-p.ready:
		case <-p.done:
			tb.Fatalf("process %d exited: %q", i, p.lines) // done: no more lines
		case <-time.After(30 * time.Second):
			tb.Fatalf("process %d not ready within 30s", i)
		}
	}
	return procs
}

// stopFleet ends the processes and returns what each reported.
func stopFleet(procs []*fleetProc) [][]string {
	out := make([][]string, len(procs))
	for i, p := range procs {
		_ = p.stdin.Close()
		<-p.done
		out[i] = p.lines
	}
	return out
}

// summarize reads the reports of the processes of a fleet run.
func summarize(tb testing.TB, procs [][]string, faultAt time.Time) fleetResult {
	type change struct {
		at     time.Time
		proc   int
		engine string
	}
	var (
		r       = fleetResult{equalEpochs: true}
		changes []change
		current = make([]string, len(procs))
		epochs  = make([]uint64, len(procs))
		firsts  []time.Time
	)
	for i, lines := range procs {
		var refusedSince time.Time
		first := time.Time{}
		for _, line := range lines {
			f := strings.Fields(line)
			if len(f) < 2 {
				continue
			}
			nanos, _ := strconv.ParseInt(f[1], 10, 64)
			at := time.Unix(0, nanos)
			switch f[0] {
			case "ready":
				current[i] = f[1]
				epochs[i], _ = strconv.ParseUint(f[2], 10, 64)
			case "switch":
				if f[4] == string(switcher.ReasonDeferred) {
					continue
				}
				changes = append(changes, change{at, i, f[2]})
				epochs[i], _ = strconv.ParseUint(f[3], 10, 64)
				if first.IsZero() && at.After(faultAt) {
					first = at
				}
			case "error":
				r.errors++
				tb.Logf("process %d: %s", i, line)
			case "write":
				switch {
				case f[2] == "0" && refusedSince.IsZero():
					refusedSince = at
				case f[2] == "1" && !refusedSince.IsZero():
					r.fencedOut = max(r.fencedOut, at.Sub(refusedSince))
					refusedSince = time.Time{}
				}
			}
		}
		if !refusedSince.IsZero() {
			tb.Logf("process %d: fenced writes refused from %v to the end", i, refusedSince.Sub(faultAt))
			r.fencedOut = max(r.fencedOut, faultAt.Add(3*time.Second).Sub(refusedSince))
		}
		if first.IsZero() {
			tb.Fatalf("process %d never switched: %q", i, lines)
		}
		firsts = append(firsts, first)
	}
	for _, e := range epochs {
		r.equalEpochs = r.equalEpochs && e == epochs[0]
	}
	slices.SortFunc(firsts, func(a, b time.Time) int { return a.Compare(b) })
	r.firstSwitch, r.spread = firsts[0].Sub(faultAt), firsts[len(firsts)-1].Sub(firsts[0])
	slices.SortFunc(changes, func(a, b change) int { return a.at.Compare(b.at) })
	splitSince := time.Time{}
	for _, c := range changes {
		current[c.proc] = c.engine
		together := !slices.ContainsFunc(current, func(e string) bool { return e != current[0] })
		switch {
		case !together && splitSince.IsZero():
			splitSince = c.at
		case together && !splitSince.IsZero():
			r.split += c.at.Sub(splitSince)
			splitSince = time.Time{}
		}
	}
	return r
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// spread formats min/median/max.
func spread(ds []time.Duration) string {
	s := slices.Clone(ds)
	slices.Sort(s)
	r := func(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
	return fmt.Sprintf("%v/%v/%v", r(s[0]), r(median(s)), r(s[len(s)-1]))
}
