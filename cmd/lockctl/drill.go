package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/orthrus-go/orthrus/config"
	"github.com/orthrus-go/orthrus/engines/etcd"
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
  lockctl drill --config staging.yaml --duration 5m
      the configured engines; break one by hand and watch the failover
`

type drillFlags struct {
	config   string
	workers  int
	names    int
	duration time.Duration
	hold     time.Duration
	ttl      time.Duration
	killAt   time.Duration
	switchAt time.Duration
	switchTo string
	report   string
}

func runDrill(args []string, stdout, stderr io.Writer) error {
	var f drillFlags
	fs := newFlags("drill", "[flags]", drillExamples, stderr)
	fs.StringVar(&f.config, "config", "", "config `FILE` of the engines to drill (default: two embedded etcd servers)")
	fs.IntVar(&f.workers, "workers", 16, "concurrent lock owners")
	fs.IntVar(&f.names, "names", 64, "distinct lock names")
	fs.DurationVar(&f.duration, "duration", 20*time.Second, "how long the workload runs")
	fs.DurationVar(&f.hold, "hold", 2*time.Millisecond, "time spent inside each critical section")
	fs.DurationVar(&f.ttl, "ttl", 5*time.Second, "lease TTL of each hold (renewed while held)")
	fs.DurationVar(&f.killAt, "kill-at", -1, "stop the primary at this offset (embedded engines only; default 10s there, 0 = never)")
	fs.DurationVar(&f.switchAt, "switch-at", 0, "switch to the next engine at this offset (0 = never)")
	fs.StringVar(&f.switchTo, "switch-to", "", "engine --switch-at switches to (default: the next in order)")
	fs.StringVar(&f.report, "report", "", "write report.html and report.json into `DIR`")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := f.validate(fs.NArg()); err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

	var hooks []switcher.Option
	d := drill.New(drill.Config{
		Workers: f.workers, Names: f.names, Duration: f.duration, Hold: f.hold, TTL: f.ttl,
		Progress: newProgress(stdout).show,
	})
	hooks = append(hooks, switcher.OnSwitch(d.OnSwitch), switcher.WithLogger(logger))

	var (
		sw     *switcher.Switcher
		faults []drill.Fault
		mode   string
	)
	if f.config == "" {
		pair, err := startPair(ctx, logger, hooks)
		if err != nil {
			return err
		}
		defer pair.close()
		sw, mode = pair.sw, "embedded etcd pair ("+pair.primary.client+", "+pair.secondary.client+")"
		if f.killAt != 0 {
			faults = append(faults, drill.Fault{At: f.killAt, Name: "stop " + pair.primary.name, Do: pair.primary.stop})
		}
	} else {
		cfg, err := config.Load(f.config)
		if err != nil {
			return err
		}
		csw, err := config.Open(ctx, cfg, config.WithLogger(logger), config.WithSwitcherOptions(hooks...))
		if err != nil {
			return err
		}
		defer csw.Close()
		sw, mode = csw.Switcher, "config "+f.config
		if f.switchAt > 0 {
			faults = append(faults, switchFault(sw, csw.Source(), f.switchAt, f.switchTo))
		}
	}
	if f.config == "" && f.switchAt > 0 {
		faults = append(faults, switchFault(sw, nil, f.switchAt, f.switchTo))
	}
	d.SetFaults(faults)

	fmt.Fprintf(stdout, "orthrus drill: %s; %d workers on %d names for %v\n", mode, f.workers, f.names, f.duration)
	r, err := d.Run(ctx, sw)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout)
	printSummary(stdout, r)
	if f.report != "" {
		if err := writeReport(f.report, r); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "report: %s/report.html, %s/report.json\n", f.report, f.report)
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
	case f.config != "" && f.killAt > 0:
		return errors.New("--kill-at: only with the embedded engines; with --config, break an engine by hand or use --switch-at")
	case f.switchTo != "" && f.switchAt == 0:
		return errors.New("--switch-to: needs --switch-at")
	}
	if f.killAt < 0 { // not set
		f.killAt = 0
		if f.config == "" {
			f.killAt = f.duration / 2
		}
	}
	return nil
}

// switchFault flips to the target engine at the given offset: through the
// watched key when the source can be written, so that the whole fleet
// follows, and through SwitchEngineTo otherwise.
func switchFault(sw *switcher.Switcher, src switcher.Source, at time.Duration, to string) drill.Fault {
	name := "switch to " + to
	if to == "" {
		name = "switch to the next engine"
	}
	return drill.Fault{At: at, Name: name, Do: func() error {
		target := to
		if target == "" {
			states := sw.States()
			for i, st := range states {
				if st.Current {
					target = states[(i+1)%len(states)].Name
				}
			}
		}
		if setter, ok := src.(switcher.Setter); ok {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			return setter.Set(ctx, target)
		}
		_, err := sw.SwitchEngineTo(target)
		return err
	}}
}

// pair is the drill's default: two embedded etcd servers as primary and
// secondary behind a switcher.
type pair struct {
	primary, secondary *embeddedEtcd
	clients            []*clientv3.Client
	sw                 *switcher.Switcher
}

func startPair(ctx context.Context, logger *slog.Logger, opts []switcher.Option) (*pair, error) {
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
		e, err := etcd.New(c, etcd.WithName(srv.name), etcd.WithPrefix("lockctl-drill"),
			etcd.WithRequestTimeout(500*time.Millisecond), etcd.WithLogger(logger))
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
