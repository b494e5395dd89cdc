package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/orthrus-go/orthrus/config"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/switcher"
)

// inspector is what lockctl needs of an engine to show and clear holds.
type inspector interface {
	Inspect(ctx context.Context, name string) (locker.Inspection, error)
	ForceUnlock(ctx context.Context, name string) (locker.Holder, error)
}

// opTimeout bounds every operation command.
const opTimeout = 15 * time.Second

func loadConfig(path string) (*config.Config, error) {
	if path == "" {
		return nil, errors.New("--config: required, the path of a YAML, TOML or JSON config file")
	}
	return config.Load(path)
}

// withConfig loads and opens the --config file, runs fn within opTimeout
// and closes everything again.
func withConfig(path string, fn func(ctx context.Context, sw *config.Switcher) error) error {
	cfg, err := loadConfig(path)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	sw, err := config.Open(ctx, cfg)
	if err != nil {
		return err
	}
	defer sw.Close()
	return fn(ctx, sw)
}

func runStatus(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("status", "--config FILE", "  lockctl status --config /etc/myapp/locks.yaml\n", stderr)
	path := fs.String("config", "", "config `FILE`")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return errors.New("status takes no arguments, only --config")
	}
	cfg, err := loadConfig(*path)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	sw, err := config.Open(ctx, cfg)
	if errors.Is(err, locker.ErrUnavailable) {
		return degradedStatus(ctx, cfg, err, stdout)
	}
	if err != nil {
		return err
	}
	defer sw.Close()
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ENGINE\tCURRENT\tBREAKER\tSECURITY\tHEALTH")
	engines := sw.Engines()
	for i, st := range sw.States() {
		health := "ok"
		pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
		if err := engines[i].Ping(pctx); err != nil {
			health = "failing: " + err.Error()
		}
		pcancel()
		current := ""
		if st.Current {
			current = "*"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", st.Name, current, st.Breaker, cfg.Engines[i].Security(), health)
	}
	return tw.Flush()
}

// degradedStatus reports each engine's health when an unreachable one
// kept the switcher from starting: the moment an operator most needs it.
func degradedStatus(ctx context.Context, cfg *config.Config, openErr error, stdout io.Writer) error {
	errs, err := config.Probe(ctx, cfg)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ENGINE\tCURRENT\tBREAKER\tSECURITY\tHEALTH")
	for i, e := range cfg.Engines {
		health := "ok"
		if errs[i] != nil {
			health = "failing: " + errs[i].Error()
		}
		fmt.Fprintf(tw, "%s\t?\t-\t%s\t%s\n", e.Name, e.Security(), health)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return fmt.Errorf("no switcher could start, so current and breakers are unknown: %w", openErr)
}

func runHolders(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("holders", "--config FILE NAME", "  lockctl holders --config locks.yaml orders/42\n", stderr)
	path := fs.String("config", "", "config `FILE`")
	if err := fs.Parse(args); err != nil {
		return err
	}
	name, err := lockArg(fs.Args())
	if err != nil {
		return err
	}
	return withConfig(*path, func(ctx context.Context, sw *config.Switcher) error {
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ENGINE\tROLE\tOWNER\tTOKEN\tTIME LEFT")
		for _, e := range sw.Engines() {
			in, ok := e.(inspector)
			if !ok {
				fmt.Fprintf(tw, "%s\t-\tcannot inspect this engine\t\t\n", e.Name())
				continue
			}
			info, err := in.Inspect(ctx, name)
			if err != nil {
				fmt.Fprintf(tw, "%s\terror\t%v\t\t\n", e.Name(), err)
				continue
			}
			if info.Holder == nil {
				fmt.Fprintf(tw, "%s\tfree\t\t\t\n", e.Name())
			} else {
				fmt.Fprintf(tw, "%s\tholder\t%s\t%d\t%s\n", e.Name(), info.Holder.Owner, info.Holder.Token, timeLeft(info.Holder.TTL))
			}
			for i, w := range info.Waiters {
				fmt.Fprintf(tw, "%s\twaiter %d\t%s\t%d\t%s\n", e.Name(), i+1, w.Owner, w.Token, timeLeft(w.TTL))
			}
			if info.Subscribers > 0 {
				fmt.Fprintf(tw, "%s\twaiting\t%d process(es) subscribed\t\t\n", e.Name(), info.Subscribers)
			}
		}
		return tw.Flush()
	})
}

func timeLeft(d time.Duration) string {
	if d <= 0 {
		return "session"
	}
	return d.Round(time.Millisecond).String()
}

func lockArg(args []string) (string, error) {
	if len(args) != 1 {
		return "", fmt.Errorf("want exactly one lock NAME, got %d arguments", len(args))
	}
	return args[0], locker.ValidateName(args[0])
}

func runUnlock(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("unlock", "--force --config FILE [--engine ENGINE] [--yes] NAME",
		"  lockctl unlock --force --config locks.yaml orders/42\n  lockctl unlock --force --yes --config locks.yaml --engine zk-backup orders/42\n", stderr)
	path := fs.String("config", "", "config `FILE`")
	force := fs.Bool("force", false, "required: removing another owner's hold breaks its mutual exclusion")
	engine := fs.String("engine", "", "the engine to clear (default: the one engine that holds NAME)")
	yes := fs.Bool("yes", false, "do not ask for confirmation")
	if err := fs.Parse(args); err != nil {
		return err
	}
	name, err := lockArg(fs.Args())
	if err != nil {
		return err
	}
	if !*force {
		return errors.New("--force: required; the owner of the hold keeps running and will lose its lock")
	}
	return withConfig(*path, func(ctx context.Context, sw *config.Switcher) error {
		target, holder, err := pickHeld(ctx, sw.Engines(), name, *engine)
		if err != nil {
			return err
		}
		if !*yes {
			fmt.Fprintf(stdout, "Remove the hold of %q on %s (owner %s, token %d)? [y/N] ", name, target.Name(), holder.Owner, holder.Token)
			answer, _ := bufio.NewReader(os.Stdin).ReadString('\n')
			if a := strings.ToLower(strings.TrimSpace(answer)); a != "y" && a != "yes" {
				return errors.New("not confirmed; nothing removed")
			}
		}
		// A fresh bound: the operator may have taken a while to answer.
		fctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		defer cancel()
		removed, err := target.(inspector).ForceUnlock(fctx, name)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "removed the hold of %q on %s (owner %s, token %d)\n", name, target.Name(), removed.Owner, removed.Token)
		return nil
	})
}

// pickHeld finds the engine to clear: the named one, or the only one
// holding name.
func pickHeld(ctx context.Context, engines []locker.Engine, name, want string) (locker.Engine, locker.Holder, error) {
	var found []locker.Engine
	var holders []locker.Holder
	var blind []string // engines that cannot be inspected
	known := false
	for _, e := range engines {
		if want != "" && e.Name() != want {
			continue
		}
		known = true
		in, ok := e.(inspector)
		if !ok {
			blind = append(blind, e.Name())
			continue
		}
		info, err := in.Inspect(ctx, name)
		if err != nil {
			return nil, locker.Holder{}, fmt.Errorf("%s: %w", e.Name(), err)
		}
		if info.Holder != nil {
			found, holders = append(found, e), append(holders, *info.Holder)
		}
	}
	switch {
	case want != "" && !known:
		return nil, locker.Holder{}, fmt.Errorf("--engine: unknown engine %q", want)
	case len(found) == 0 && len(blind) > 0:
		return nil, locker.Holder{}, fmt.Errorf("%q is not held on the engines that can be inspected (%s cannot be): %w", name, strings.Join(blind, ", "), locker.ErrNotHeld)
	case len(found) == 0:
		return nil, locker.Holder{}, fmt.Errorf("%q is not held: %w", name, locker.ErrNotHeld)
	case len(found) > 1:
		return nil, locker.Holder{}, fmt.Errorf("%q is held on %d engines: choose one with --engine", name, len(found))
	}
	return found[0], holders[0], nil
}

func runSwitch(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("switch", "--config FILE ENGINE", "  lockctl switch --config locks.yaml zk-backup\n", stderr)
	path := fs.String("config", "", "config `FILE`")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return fmt.Errorf("want exactly one ENGINE name, got %d arguments", fs.NArg())
	}
	target := fs.Arg(0)
	return withConfig(*path, func(ctx context.Context, sw *config.Switcher) error {
		var names []string
		for _, e := range sw.Engines() {
			names = append(names, e.Name())
		}
		if !slices.Contains(names, target) {
			return fmt.Errorf("unknown engine %q (want one of %s)", target, strings.Join(names, ", "))
		}
		setter, ok := sw.Source().(switcher.Setter)
		if !ok {
			return errors.New("--config: the configuration has no source that can be written (source.type etcd, zk or file)")
		}
		if err := setter.Set(ctx, target); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "switched: every switcher watching the source moves to %s\n", target)
		return nil
	})
}
