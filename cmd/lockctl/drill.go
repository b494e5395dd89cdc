package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/orthrus-go/orthrus/engines/etcd"
	"github.com/orthrus-go/orthrus/engines/mem"
	"github.com/orthrus-go/orthrus/internal/drill"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/switcher"
)

const drillExamples = `  lockctl drill
      two embedded etcd servers; the primary is stopped at 10s
  lockctl drill --duration 30s --kill-at 12s --report ./report
      the same, longer, with an HTML and JSON report in ./report
  lockctl drill --config staging.yaml --switch-at 10s
      the configured engines; flip to the next engine at 10s (through the
      watched key when the config has a source)
  lockctl drill --config staging.yaml --processes 3 --switch-at 10s --report ./report
      three worker processes on the same config, flipped through its
      source: the fleet's switch spread, split time and fenced-out time
  lockctl drill --config staging.yaml --duration 5m
      the configured engines; break one by hand and watch the failover
  lockctl drill --config staging.yaml --duration 5m --metrics-addr :9464
      the same, with the metrics of package telemetry at
      http://localhost:9464/metrics for Prometheus and the dashboard in docs/

With --config, the drill's locks live under a drill-only prefix of each
engine ("<prefix>-lockctl-drill-<id>"), removed at the end, and a source it
flipped is put back as it was, byte for byte, at the end or on Ctrl-C.
`

// optDuration is a duration flag that knows whether it was set: its help
// shows no default.
type optDuration struct {
	d   time.Duration
	set bool
}

func (o *optDuration) String() string {
	if o == nil || !o.set {
		return ""
	}
	return o.d.String()
}

func (o *optDuration) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	o.d, o.set = d, true
	return nil
}

type drillFlags struct {
	config    string
	engine    string
	workers   int
	names     int
	duration  time.Duration
	hold      time.Duration
	ttl       time.Duration
	killAt    optDuration
	switchAt  time.Duration
	switchTo  string
	report    string
	processes int
	metrics   string

	serving *metricsServer // --metrics-addr's, nil without it

	// A worker process of a fleet drill (hidden).
	worker  int
	drillID string
}

func runDrill(args []string, stdout, stderr io.Writer) error {
	var f drillFlags
	if err := f.parse(args, stderr); err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if f.metrics != "" {
		var err error
		if f.serving, err = serveMetrics(f.metrics, stdout); err != nil {
			return err
		}
		defer f.serving.close()
	}
	switch {
	case f.worker > 0:
		return runWorker(ctx, &f, logger, stdout)
	case f.config != "":
		return runConfigDrill(ctx, &f, logger, stdout, stderr)
	}

	d := drill.New(f.drillConfig(newProgress(stdout).show))
	swOpts := []switcher.Option{switcher.OnSwitch(d.OnSwitch), switcher.WithLogger(logger)}
	if f.serving != nil {
		swOpts = append(swOpts, switcher.WithObserver(f.serving.tel))
	}
	eng, err := startDrillEngines(ctx, &f, logger, swOpts, stdout)
	if err != nil {
		return err
	}
	defer eng.close()
	var faults []drill.Fault
	if f.killAt.d > 0 {
		faults = append(faults, drill.Fault{At: f.killAt.d, Name: "stop " + eng.primary, Do: eng.kill})
	}
	if f.switchAt > 0 {
		faults = append(faults, switchFault(f.switchAt, f.switchTo, eng.sw.States, func(_ context.Context, to string) error {
			_, err := eng.sw.SwitchEngineTo(to)
			return err
		}))
	}
	d.SetFaults(faults)
	r, err := d.Run(ctx, eng.sw)
	if err != nil {
		return err
	}
	r.Setup = eng.setup
	return finish(&f, r, stdout)
}

// parse reads and checks the drill's flags.
func (f *drillFlags) parse(args []string, stderr io.Writer) error {
	fs := newFlags("drill", "[flags]", drillExamples, stderr)
	fs.StringVar(&f.config, "config", "", "config `FILE` of the engines to drill (default: two embedded engines, see --engine)")
	fs.StringVar(&f.engine, "engine", "etcd", "the embedded `KIND` without --config: etcd (two in-process etcd servers) or mem (two in-memory engines, no server at all)")
	fs.IntVar(&f.workers, "workers", 16, "concurrent lock owners (per process)")
	fs.IntVar(&f.names, "names", 64, "distinct lock names")
	fs.DurationVar(&f.duration, "duration", 20*time.Second, "how long the workload runs")
	fs.DurationVar(&f.hold, "hold", 2*time.Millisecond, "time spent inside each critical section")
	fs.DurationVar(&f.ttl, "ttl", 5*time.Second, "lease TTL of each hold (renewed while held)")
	fs.Var(&f.killAt, "kill-at", "stop the primary after this `duration`; embedded engines only (default: half of --duration; 0 = never)")
	fs.DurationVar(&f.switchAt, "switch-at", 0, "switch to the next engine at this offset (0 = never)")
	fs.StringVar(&f.switchTo, "switch-to", "", "engine --switch-at switches to (default: the next in order)")
	fs.StringVar(&f.report, "report", "", "write report.html, timeline.svg and report.json into `DIR`")
	fs.IntVar(&f.processes, "processes", 1, "worker processes on the same --config, each with its own switcher")
	fs.StringVar(&f.metrics, "metrics-addr", "", "serve Prometheus metrics on `ADDR`/metrics (such as :9464) while the drill runs")
	fs.IntVar(&f.worker, "worker", 0, "")
	fs.StringVar(&f.drillID, "drill-id", "", "")
	hidden := map[string]bool{"worker": true, "drill-id": true}
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: lockctl drill [flags]\n\nFlags:\n")
		fs.VisitAll(func(fl *flag.Flag) {
			if !hidden[fl.Name] {
				printFlag(stderr, fl)
			}
		})
		fmt.Fprintf(stderr, "\nExamples:\n%s", drillExamples)
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	return f.validate(fs.NArg())
}

// printFlag prints one flag as flag.PrintDefaults does.
func printFlag(w io.Writer, fl *flag.Flag) {
	name, usage := flag.UnquoteUsage(fl)
	line := "  -" + fl.Name
	if name != "" {
		line += " " + name
	}
	if len(line) <= 4 {
		line += "\t"
	} else {
		line += "\n    \t"
	}
	line += strings.ReplaceAll(usage, "\n", "\n    \t")
	if def := fl.DefValue; def != "" && def != "0" && def != "0s" && def != "false" {
		if _, ok := fl.Value.(*optDuration); !ok {
			line += fmt.Sprintf(" (default %v)", def)
		}
	}
	fmt.Fprintln(w, line)
}

func (f *drillFlags) drillConfig(progress func(drill.Snapshot)) drill.Config {
	return drill.Config{
		Workers: f.workers, Names: f.names, Duration: f.duration, Hold: f.hold, TTL: f.ttl,
		Progress: progress,
	}
}

// finish prints the summary, writes the report and turns a failed check
// into the exit code.
func finish(f *drillFlags, r *drill.Report, stdout io.Writer) error {
	fmt.Fprintln(stdout)
	printSummary(stdout, r)
	if f.report != "" {
		paths, err := writeReport(f.report, r)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "report: %s\n", strings.Join(paths, ", "))
	}
	if !r.OK() {
		return errChecksFailed
	}
	return nil
}

func (f *drillFlags) validate(nargs int) error {
	switch {
	case nargs > 0:
		return errors.New("drill takes no arguments, only flags (see lockctl drill -h)")
	case f.workers < 1:
		return fmt.Errorf("--workers: want at least 1, got %d", f.workers)
	case f.names < 1:
		return fmt.Errorf("--names: want at least 1, got %d", f.names)
	case f.duration <= 0:
		return fmt.Errorf("--duration: want a positive duration such as 20s, got %v", f.duration)
	case f.hold < 0:
		return fmt.Errorf("--hold: want a duration of at least 0, got %v", f.hold)
	case f.ttl <= 0:
		return fmt.Errorf("--ttl: want a positive duration such as 5s, got %v", f.ttl)
	case f.switchAt < 0:
		return fmt.Errorf("--switch-at: want a positive offset such as 10s, got %v", f.switchAt)
	case f.killAt.d < 0:
		return fmt.Errorf("--kill-at: want a positive offset such as 10s, got %v", f.killAt.d)
	case f.config != "" && f.killAt.set && f.killAt.d > 0:
		return errors.New("--kill-at: only with the embedded engines; with --config, break an engine by hand or use --switch-at")
	case f.killAt.d >= f.duration:
		return fmt.Errorf("--kill-at %v: not before the end of the drill (--duration %v); the fault would never happen", f.killAt.d, f.duration)
	case f.switchAt >= f.duration:
		return fmt.Errorf("--switch-at %v: not before the end of the drill (--duration %v); the switch would never happen", f.switchAt, f.duration)
	case f.switchTo != "" && f.switchAt == 0:
		return errors.New("--switch-to: needs --switch-at")
	case f.processes < 1:
		return fmt.Errorf("--processes: want at least 1, got %d", f.processes)
	case f.processes > 1 && f.metrics != "":
		return errors.New("--metrics-addr: not with --processes (each worker process has its own switcher); drill in one process")
	case f.engine != "etcd" && f.engine != "mem":
		return fmt.Errorf("--engine: want etcd or mem, got %q", f.engine)
	case f.config != "" && f.engine != "etcd":
		return errors.New("--engine: only without --config (the config names its engines)")
	case f.processes > 1 && f.config == "":
		return errors.New("--processes: needs --config (the embedded engines live in this process)")
	case f.worker > 0 && (f.config == "" || f.drillID == ""):
		return errors.New("--worker: internal flag of a fleet drill")
	}
	if !f.killAt.set && f.config == "" {
		f.killAt.d = f.duration / 2
	}
	return nil
}

// switchFault flips to the target engine (by default the next after the
// current one, which current tells) at the given offset, with set.
func switchFault(at time.Duration, to string, current func() []switcher.EngineState, set func(ctx context.Context, to string) error) drill.Fault {
	name := "switch to " + to
	if to == "" {
		name = "switch to the next engine"
	}
	return drill.Fault{At: at, Name: name, Kind: drill.KindPlanned, Do: func() error {
		target := to
		if target == "" {
			states := current()
			for i, st := range states {
				if st.Current {
					target = states[(i+1)%len(states)].Name
				}
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return set(ctx, target)
	}}
}

// drillEngines are the embedded engines of a drill without --config.
type drillEngines struct {
	sw      *switcher.Switcher
	primary string       // the engine --kill-at stops
	kill    func() error // stops the primary
	close   func()       // stops everything
	setup   drill.Setup
}

// startDrillEngines starts the embedded engines --engine names and prints
// what they are.
func startDrillEngines(ctx context.Context, f *drillFlags, logger *slog.Logger, swOpts []switcher.Option, stdout io.Writer) (*drillEngines, error) {
	if f.engine == "mem" {
		var engOpts []mem.Option
		if f.serving != nil {
			engOpts = append(engOpts, mem.WithObserver(f.serving.tel))
		}
		p, err := startMemPair(logger, swOpts, engOpts...)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(stdout, "orthrus drill: in-memory pair (no server); %d workers on %d names for %v\n", f.workers, f.names, f.duration)
		return &drillEngines{sw: p.sw, primary: "mem-primary", kill: p.kill, close: func() { _ = p.sw.Close() },
			setup: drill.Setup{Targets: []drill.Target{
				{Name: "mem-primary", Type: "mem"}, {Name: "mem-secondary", Type: "mem"},
			}}}, nil
	}
	var engOpts []etcd.Option
	if f.serving != nil {
		engOpts = append(engOpts, etcd.WithObserver(f.serving.tel))
	}
	p, err := startPair(ctx, logger, swOpts, engOpts...)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(stdout, "orthrus drill: embedded etcd pair (%s, %s); %d workers on %d names for %v\n",
		p.primary.client, p.secondary.client, f.workers, f.names, f.duration)
	var setup drill.Setup
	for _, srv := range []*embeddedEtcd{p.primary, p.secondary} {
		setup.Targets = append(setup.Targets, drill.Target{Name: srv.name, Type: "etcd", Addrs: []string{srv.client}, Security: "no tls"})
	}
	return &drillEngines{sw: p.sw, primary: p.primary.name, kill: p.primary.stop, close: p.close, setup: setup}, nil
}

// pair is the drill's default: two embedded etcd servers as primary and
// secondary behind a switcher.
type pair struct {
	primary, secondary *embeddedEtcd
	clients            []*clientv3.Client
	sw                 *switcher.Switcher
}

func startPair(ctx context.Context, logger *slog.Logger, opts []switcher.Option, engOpts ...etcd.Option) (*pair, error) {
	p := &pair{}
	var err error
	if p.primary, err = startEmbedded("etcd-primary"); err != nil {
		return nil, err
	}
	if p.secondary, err = startEmbedded("etcd-secondary"); err != nil {
		p.close()
		return nil, err
	}
	var engines []locker.Engine
	for _, srv := range []*embeddedEtcd{p.primary, p.secondary} {
		c, err := clientv3.New(clientv3.Config{
			Endpoints: []string{srv.client}, DialTimeout: 2 * time.Second, Logger: zap.NewNop(), Context: ctx,
		})
		if err != nil {
			p.close()
			return nil, fmt.Errorf("etcd client for %s: %w", srv.name, err)
		}
		p.clients = append(p.clients, c)
		e, err := etcd.New(c, append([]etcd.Option{etcd.WithName(srv.name), etcd.WithPrefix("lockctl-drill"),
			etcd.WithRequestTimeout(500 * time.Millisecond), etcd.WithLogger(logger)}, engOpts...)...)
		if err != nil {
			p.close()
			return nil, err
		}
		engines = append(engines, e)
	}
	if p.sw, err = switcher.New(engines, opts...); err != nil {
		p.close()
		return nil, err
	}
	return p, nil
}

func (p *pair) close() {
	if p.sw != nil {
		_ = p.sw.Close()
	}
	for _, c := range p.clients {
		_ = c.Close()
	}
	for _, s := range []*embeddedEtcd{p.primary, p.secondary} {
		if s != nil {
			s.close()
		}
	}
}
