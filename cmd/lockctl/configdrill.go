package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/orthrus-go/orthrus/cmd/lockctl/internal/cfgops"
	"github.com/orthrus-go/orthrus/config"
	"github.com/orthrus-go/orthrus/internal/drill"
	"github.com/orthrus-go/orthrus/switcher"
)

// newDrillID returns a short random id for a drill's prefixes.
func newDrillID() string {
	const digits = "0123456789abcdefghijklmnopqrstuvwxyz"
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = digits[int(b[i])%len(digits)]
	}
	return string(b)
}

// drillEnv is what a drill on a user's configuration sets up around the
// load, and undoes at the end: a drill-only prefix on every engine and a
// snapshot of the source.
type drillEnv struct {
	cfg    *config.Config
	scope  *cfgops.DrillScope
	source *cfgops.SourceHandle // nil without a source
	snap   *cfgops.SourceSnapshot
	stdout io.Writer
	stderr io.Writer
	once   sync.Once
}

func setUpDrill(ctx context.Context, f *drillFlags, logger *slog.Logger, stdout, stderr io.Writer) (*drillEnv, error) {
	cfg, err := config.Load(f.config)
	if err != nil {
		return nil, err
	}
	if f.switchTo != "" && !cfg.HasEngine(f.switchTo) {
		return nil, fmt.Errorf("--switch-to: unknown engine %q (want one of %s)", f.switchTo, strings.Join(cfg.EngineNames(), ", "))
	}
	if f.processes > 1 && f.switchAt > 0 && cfg.Source.Type == config.SourceNone {
		return nil, errors.New("--processes with --switch-at: the config has no source (source.type none) to flip the fleet through")
	}
	sctx, cancel := context.WithTimeout(ctx, 2*cfg.StartTimeout)
	defer cancel()
	env := &drillEnv{cfg: cfg, stdout: stdout, stderr: stderr}
	if env.scope, err = cfgops.NewDrillScope(sctx, cfg, newDrillID(), config.WithLogger(logger)); err != nil {
		return nil, err
	}
	if cfg.Source.Type != config.SourceNone {
		if env.source, err = cfgops.DialSource(sctx, cfg, config.WithLogger(logger)); err != nil {
			return nil, err
		}
		if env.snap, err = env.source.Snapshot(sctx); err != nil {
			_ = env.source.Close()
			return nil, err
		}
	}
	return env, nil
}

// prefixes lists the drill-only prefixes, for the operator.
func (e *drillEnv) prefixes() string {
	var out []string
	for _, eng := range e.scope.Config().Engines {
		out = append(out, eng.Name+": "+eng.Prefix)
	}
	return strings.Join(out, ", ")
}

// restore puts the source back and removes the drill's keys. Call it once
// every switcher of the drill is closed; it runs once.
func (e *drillEnv) restore() {
	e.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*e.cfg.StartTimeout)
		defer cancel()
		if e.source != nil {
			changed, err := e.source.Restore(ctx, e.snap)
			switch {
			case err != nil:
				fmt.Fprintf(e.stderr, "lockctl drill: %v\n", err)
			case changed:
				fmt.Fprintf(e.stdout, "restored: the %s source %s is as it was before the drill\n", e.source.Kind(), e.source.Where())
			}
			_ = e.source.Close()
		}
		if err := e.scope.Remove(ctx); err != nil {
			fmt.Fprintf(e.stderr, "lockctl drill: %v\n", err)
		} else {
			fmt.Fprintf(e.stdout, "cleaned: the drill's keys and nodes are gone (%s)\n", e.prefixes())
		}
	})
}

// set flips the fleet to engine: through the source when there is one.
func (e *drillEnv) set(sw *switcher.Switcher) func(ctx context.Context, engine string) error {
	if e.source != nil {
		return e.source.Source().(switcher.Setter).Set
	}
	return func(_ context.Context, engine string) error {
		_, err := sw.SwitchEngineTo(engine)
		return err
	}
}

// runConfigDrill drills the engines of --config, in this process or in
// --processes worker processes.
func runConfigDrill(ctx context.Context, f *drillFlags, logger *slog.Logger, stdout, stderr io.Writer) error {
	env, err := setUpDrill(ctx, f, logger, stdout, stderr)
	if err != nil {
		return err
	}
	defer env.restore() // also on Ctrl-C: ctx ends the load, then this runs
	fmt.Fprintf(stdout, "orthrus drill: config %s, drill prefixes %s; %d process(es) × %d workers on %d names for %v\n",
		f.config, env.prefixes(), f.processes, f.workers, f.names, f.duration)
	if f.processes > 1 {
		r, err := runFleet(ctx, f, env, stdout, stderr)
		env.restore()
		if err != nil {
			return err
		}
		r.Setup = configSetup(env.cfg)
		return finish(f, r, stdout)
	}

	d := drill.New(f.drillConfig(newProgress(stdout).show))
	sw, err := config.Open(ctx, env.scope.Config(), append(f.serving.configOptions(),
		config.WithLogger(logger), config.WithSwitcherOptions(switcher.OnSwitch(d.OnSwitch)))...)
	if err != nil {
		return err
	}
	defer sw.Close()
	if f.switchAt > 0 {
		d.SetFaults([]drill.Fault{switchFault(f.switchAt, f.switchTo, sw.States, env.set(sw.Switcher))})
	}
	r, err := d.Run(ctx, sw.Switcher)
	_ = sw.Close()
	env.restore()
	if err != nil {
		return err
	}
	r.Setup = configSetup(env.cfg)
	return finish(f, r, stdout)
}

// worker is one worker process of a fleet drill.
type worker struct {
	id     string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	out    *bufio.Reader
	stderr strings.Builder
	ready  string // the engine it started on
	report *drill.Report
	err    error
}

// runFleet runs the drill in f.processes re-executions of this program,
// started together, flips the source at --switch-at, and merges their
// reports.
func runFleet(ctx context.Context, f *drillFlags, env *drillEnv, stdout, stderr io.Writer) (*drill.Report, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	ws := make(fleet, f.processes)
	defer ws.kill()
	for i := range ws {
		if ws[i], err = startWorker(exe, f, env.scope.ID(), i+1, stderr); err != nil {
			return nil, err
		}
	}
	if err := ws.awaitReady(); err != nil {
		return nil, err
	}
	start := time.Now().Add(200 * time.Millisecond)
	for _, w := range ws {
		fmt.Fprintf(w.stdin, "start %d\n", start.UnixNano())
	}
	fmt.Fprintf(stdout, "%d workers started on %s\n", len(ws), ws[0].ready)

	faults := fleetFaults(ctx, f, env, start, stdout, stderr)
	reports, err := ws.reports(ctx)
	if err != nil {
		return nil, err
	}
	return drill.Merge(reports, <-faults), nil
}

// fleet is the worker processes of a fleet drill; nil entries are not
// started.
type fleet []*worker

// startWorker starts worker n (from 1) of a fleet drill: this program
// again, in --worker mode, with the drill's flags and id.
func startWorker(exe string, f *drillFlags, drillID string, n int, stderr io.Writer) (*worker, error) {
	w := &worker{id: fmt.Sprintf("p%d", n)}
	w.cmd = exec.Command(exe, "drill", "--config", f.config, "--worker", strconv.Itoa(n), "--drill-id", drillID,
		"--workers", strconv.Itoa(f.workers), "--names", strconv.Itoa(f.names), "--duration", f.duration.String(),
		"--hold", f.hold.String(), "--ttl", f.ttl.String())
	w.cmd.Stderr = io.MultiWriter(&prefixed{w: stderr, prefix: w.id + ": "}, &w.stderr)
	var err error
	if w.stdin, err = w.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	pipe, err := w.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	w.out = bufio.NewReader(pipe)
	if err := w.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start worker %s: %w", w.id, err)
	}
	return w, nil
}

// kill ends the workers still running, for a fleet drill that fails.
func (ws fleet) kill() {
	for _, w := range ws {
		if w != nil && w.cmd.ProcessState == nil {
			_ = w.stdin.Close()
			_ = w.cmd.Process.Kill()
			_ = w.cmd.Wait()
		}
	}
}

// awaitReady waits for every worker to say "ready ENGINE", which it does
// once its switcher is open.
func (ws fleet) awaitReady() error {
	var wg sync.WaitGroup
	for _, w := range ws {
		wg.Go(func() {
			line, err := w.out.ReadString('\n')
			engine, ok := strings.CutPrefix(strings.TrimSpace(line), "ready ")
			if err != nil || !ok {
				w.err = fmt.Errorf("worker %s did not start: %q %v", w.id, line, err)
				return
			}
			w.ready = engine
		})
	}
	wg.Wait()
	for _, w := range ws {
		if w.err != nil {
			_ = w.stdin.Close()
			_ = w.cmd.Wait()
			return fmt.Errorf("%w\n%s", w.err, w.stderr.String())
		}
	}
	return nil
}

// reports waits for every worker's report and exit; closing stdin on
// Ctrl-C ends the workers early.
func (ws fleet) reports(ctx context.Context) ([]*drill.Report, error) {
	stopped := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			for _, w := range ws {
				_ = w.stdin.Close()
			}
		case <-stopped:
		}
	}()
	var wg sync.WaitGroup
	for _, w := range ws {
		wg.Go(func() {
			var r drill.Report
			if err := json.NewDecoder(w.out).Decode(&r); err != nil {
				w.err = fmt.Errorf("worker %s: no report: %w\n%s", w.id, err, w.stderr.String())
			}
			r.Process = w.id
			w.report = &r
			_ = w.stdin.Close()
			if err := w.cmd.Wait(); err != nil && w.err == nil {
				w.err = fmt.Errorf("worker %s: %w\n%s", w.id, err, w.stderr.String())
			}
		})
	}
	wg.Wait()
	close(stopped)
	var reports []*drill.Report
	var errs []error
	for _, w := range ws {
		if w.err != nil {
			errs = append(errs, w.err)
			continue
		}
		reports = append(reports, w.report)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return reports, nil
}

// fleetFaults flips the source at --switch-at (offsets from start) and
// delivers the faults it injected once the drill's duration has passed.
func fleetFaults(ctx context.Context, f *drillFlags, env *drillEnv, start time.Time, stdout, stderr io.Writer) <-chan []drill.Mark {
	out := make(chan []drill.Mark, 1)
	if f.switchAt <= 0 { // validate refuses one at or after the end
		out <- nil
		return out
	}
	go func() {
		var marks []drill.Mark
		defer func() { out <- marks }()
		t := time.NewTimer(time.Until(start.Add(f.switchAt)))
		defer t.Stop()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		at := time.Since(start)
		sctx, cancel := context.WithTimeout(ctx, env.cfg.StartTimeout)
		defer cancel()
		target := f.switchTo
		if target == "" {
			target = nextEngine(sctx, env)
		}
		m := drill.Mark{At: at, Kind: drill.KindPlanned, Label: "switch to " + target}
		if err := env.set(nil)(sctx, target); err != nil {
			m.Detail = err.Error()
			fmt.Fprintf(stderr, "lockctl drill: switch to %s: %v\n", target, err)
		}
		marks = append(marks, m)
		fmt.Fprintf(stdout, "%5.1fs  switched the source to %s\n", at.Seconds(), target)
	}()
	return out
}

// nextEngine returns the engine after the one the source names now.
func nextEngine(ctx context.Context, env *drillEnv) string {
	names := env.cfg.EngineNames()
	now := env.cfg.Active
	if v, err := env.source.Read(ctx); err == nil && v.Engine != "" {
		now = v.Engine
	}
	for i, n := range names {
		if n == now {
			return names[(i+1)%len(names)]
		}
	}
	return names[0]
}

// runWorker is one process of a fleet drill: it opens the config with the
// drill's prefixes, says "ready", waits for "start UNIXNANO" on stdin, runs
// the load and writes its report as JSON. A closed stdin ends it early.
func runWorker(ctx context.Context, f *drillFlags, logger *slog.Logger, stdout io.Writer) error {
	cfg, err := config.Load(f.config)
	if err != nil {
		return err
	}
	dcfg, err := cfg.ForDrill(f.drillID)
	if err != nil {
		return err
	}
	dc := f.drillConfig(nil)
	dc.KeepGrants = true
	d := drill.New(dc)
	sw, err := config.Open(ctx, dcfg, config.WithLogger(logger), config.WithSwitcherOptions(switcher.OnSwitch(d.OnSwitch)))
	if err != nil {
		return err
	}
	defer sw.Close()
	fmt.Fprintf(stdout, "ready %s\n", sw.Current())
	in := bufio.NewReader(os.Stdin)
	line, err := in.ReadString('\n')
	ns, perr := strconv.ParseInt(strings.TrimPrefix(strings.TrimSpace(line), "start "), 10, 64)
	if err != nil || perr != nil {
		return fmt.Errorf("worker: want \"start UNIXNANO\" on stdin, got %q", line)
	}
	d.SetStart(time.Unix(0, ns))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { // the parent closes stdin to stop the drill
		_, _ = io.Copy(io.Discard, in)
		cancel()
	}()
	r, err := d.Run(ctx, sw.Switcher)
	if err != nil {
		return err
	}
	_ = sw.Close()
	return json.NewEncoder(stdout).Encode(r)
}

// prefixed writes each line to w after prefix.
type prefixed struct {
	mu     sync.Mutex
	w      io.Writer
	prefix string
	mid    bool // in the middle of a line
}

func (p *prefixed) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []byte
	for _, c := range b {
		if !p.mid {
			out = append(out, p.prefix...)
		}
		out = append(out, c)
		p.mid = c != '\n'
	}
	if _, err := p.w.Write(out); err != nil {
		return 0, err
	}
	return len(b), nil
}
