package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/orthrus-go/orthrus/cmd/lockctl/internal/cfgops"
	"github.com/orthrus-go/orthrus/config"
	"github.com/orthrus-go/orthrus/internal/drill"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/driver"
	"github.com/orthrus-go/orthrus/locker/inspect"
	"github.com/orthrus-go/orthrus/switcher"
)

// quiet is the logger of what the operation commands dial: whatever goes
// wrong reaches the operator as the command's own output and exit code.
func quiet() config.Option { return config.WithLogger(slog.New(slog.DiscardHandler)) }

func loadConfig(path string) (*config.Config, error) {
	if path == "" {
		return nil, errors.New("--config: required, the path of a YAML, TOML or JSON config file")
	}
	return config.Load(path)
}

// dialed is what an operation command dialled: some engines, perhaps the
// source, all at once and within one start_timeout.
type dialed struct {
	engines *cfgops.Engines
	source  *cfgops.SourceHandle
	srcErr  error
}

// dial starts the named engines (every engine when names is empty; none
// when names is nil and withSource) and, withSource, the source, in
// parallel.
func dial(cfg *config.Config, names []string, allEngines, withSource bool) (*dialed, error) {
	ctx := context.Background()
	d := &dialed{}
	var engErr error
	var wg sync.WaitGroup
	if allEngines || len(names) > 0 {
		wg.Go(func() { d.engines, engErr = cfgops.Dial(ctx, cfg, names, quiet()) })
	}
	if withSource {
		wg.Go(func() { d.source, d.srcErr = cfgops.DialSource(ctx, cfg, quiet()) })
	}
	wg.Wait()
	if engErr != nil {
		d.close()
		return nil, engErr
	}
	return d, nil
}

func (d *dialed) close() {
	if d.engines != nil {
		_ = d.engines.Close()
	}
	if d.source != nil {
		_ = d.source.Close()
	}
}

// opContext bounds the requests of an operation after its dial: one more
// start_timeout.
func opContext(cfg *config.Config) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), cfg.StartTimeout)
}

// cause drops the "config: engines[i] NAME (TYPE): " of a Dial error, for
// a table whose row already names the engine.
func cause(err error) error {
	if inner := errors.Unwrap(err); inner != nil {
		return inner
	}
	return err
}

func role(i int) string {
	switch i {
	case 0:
		return "primary"
	case 1:
		return "secondary"
	}
	return fmt.Sprintf("#%d", i+1)
}

// statusProbe bounds each probe of status: an engine or a source that has
// not answered within it is reported as not answering. A frozen server
// keeps its connections open and answers nothing; status does not wait
// start_timeout for it.
const statusProbe = time.Second

func runStatus(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("status", "--config FILE", "  lockctl status --config /etc/myapp/locks.yaml\n\n"+
		"Every engine and the source are probed at once, each for at most 1s (start_timeout when shorter);\n"+
		"one that does not answer in time is \"DOWN: not answering within 1s\". PROCESSES counts the\n"+
		"switchers running on each engine, from the roster of an etcd or zk source; a file source (or\n"+
		"none) keeps no roster, so it is \"unknown\". SOURCE marks the engine the source names. Exit 1\n"+
		"when an engine is down, the source cannot be read, or a switcher disagrees with the source.\n", stderr)
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
	// Every probe at once, each within statusProbe (or start_timeout when
	// it is shorter).
	probe := min(cfg.StartTimeout, statusProbe)
	short := *cfg
	short.StartTimeout = probe
	st := statusReport{cfg: cfg, probe: probe, where: sourceWhere(cfg, *path)}
	var es *cfgops.Engines
	var engErr error
	var src *cfgops.SourceHandle
	var wg sync.WaitGroup
	wg.Go(func() { es, engErr = cfgops.Dial(context.Background(), &short, nil, quiet()) })
	if cfg.Source.Type != config.SourceNone {
		wg.Go(func() { src = st.readSource(&short) })
	}
	wg.Wait()
	if src != nil {
		defer src.Close()
	}
	if engErr != nil {
		return engErr
	}
	defer es.Close()
	st.engines = es.Dialed
	st.pingNodes()
	return st.print(stdout)
}

// nodePinger is an engine over several independent nodes (redlock) that
// can tell which of them answer.
type nodePinger interface {
	PingNodes(ctx context.Context) ([]error, error)
}

// pingNodes asks the engines over several nodes, within one probe, which
// nodes answer: a quorum that answers is healthy, but the operator should
// see the node that does not.
func (st *statusReport) pingNodes() {
	ctx, cancel := context.WithTimeout(context.Background(), st.probe)
	defer cancel()
	st.nodeErrs = make([][]error, len(st.engines))
	for i, d := range st.engines {
		if p, ok := d.Engine.(nodePinger); ok && d.Err == nil {
			st.nodeErrs[i], _ = p.PingNodes(ctx)
		}
	}
}

// sourceWhere names the source of cfg as status prints it: "file PATH",
// "etcd KEY", "zk PATH"; "" without one.
func sourceWhere(cfg *config.Config, path string) string {
	switch cfg.Source.Type {
	case config.SourceFile:
		return config.SourceFile + " " + path
	case config.SourceEtcd:
		return config.SourceEtcd + " " + cfg.Source.Key
	case config.SourceZK:
		return config.SourceZK + " " + cfg.Source.Path
	}
	return ""
}

// readSource dials the source of cfg, reads it and, when it keeps one, its
// roster, all within one probe. It returns the handle to close, nil when
// the source did not answer.
func (st *statusReport) readSource(cfg *config.Config) *cfgops.SourceHandle {
	ctx, cancel := context.WithTimeout(context.Background(), st.probe)
	defer cancel()
	h, err := cfgops.DialSource(ctx, cfg, quiet())
	if err != nil {
		st.srcErr = st.notAnswering(err)
		return nil
	}
	st.where = h.Kind() + " " + h.Where()
	if st.value, err = h.Read(ctx); err != nil {
		st.srcErr = st.notAnswering(err)
		return h
	}
	if roster, ok := h.Source().(switcher.Roster); ok {
		st.roster = true
		members, err := roster.Members(ctx)
		st.members, st.rosterErr = members, st.notAnswering(err)
	}
	return h
}

// notAnswering says "not answering within PROBE" for an error of a probe
// that ran out of time.
func (st *statusReport) notAnswering(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("not answering within %v", st.probe)
	}
	return err
}

func (st *statusReport) health(i int, d cfgops.Dialed) string {
	switch {
	case d.Err == nil:
		return "ok (" + drill.Round(d.Took).String() + ")" + st.nodesDown(i)
	case errors.Is(d.Err, context.DeadlineExceeded) || st.probe > 0 && d.Took >= st.probe:
		return fmt.Sprintf("DOWN: not answering within %v", st.probe)
	}
	return "DOWN: " + cause(d.Err).Error()
}

// nodesDown lists the nodes of engine i that did not answer its ping,
// with their addresses; "" when all did.
func (st *statusReport) nodesDown(i int) string {
	if i >= len(st.nodeErrs) {
		return "" // not asked
	}
	var down []string
	for n, err := range st.nodeErrs[i] {
		if err != nil {
			down = append(down, st.cfg.Engines[i].Addrs[n])
		}
	}
	if len(down) == 0 {
		return ""
	}
	return fmt.Sprintf(", but %d of %d nodes not answering: %s", len(down), len(st.nodeErrs[i]), strings.Join(down, " "))
}

// statusReport is what lockctl status found, side by side: the source,
// each engine's health, and where the switchers of the fleet run.
type statusReport struct {
	cfg       *config.Config
	probe     time.Duration // the bound of each probe
	where     string        // "" without a source
	value     cfgops.SourceValue
	srcErr    error
	engines   []cfgops.Dialed
	nodeErrs  [][]error // by engine: each node's ping (engines over several nodes)
	roster    bool      // the source lists its switchers
	members   []switcher.Member
	rosterErr error
	now       time.Time // for "ago"; zero: time.Now
}

// fleetKnown tells whether status knows where the processes run: the
// source keeps a roster and it was read.
func (st *statusReport) fleetKnown() bool {
	return st.roster && st.srcErr == nil && st.rosterErr == nil
}

func (st *statusReport) print(w io.Writer) error {
	var problems []string
	named, mark := st.cfg.Active, "active"
	switch {
	case st.where == "":
		fmt.Fprintf(w, "source:  none; processes start on active in the file: %s\n", named)
	case st.srcErr != nil:
		fmt.Fprintf(w, "source:  %s: UNREACHABLE: %v\n", st.where, st.srcErr)
		problems = append(problems, "the source is unreachable")
		named = ""
	case !st.value.Exists || st.value.Engine == "":
		fmt.Fprintf(w, "source:  %s: not set; processes start on active (%s)\n", st.where, named)
	default:
		named, mark = st.value.Engine, "named"
		epoch := ""
		if st.value.Epoch > 0 {
			epoch = fmt.Sprintf(", epoch %d", st.value.Epoch)
		}
		fmt.Fprintf(w, "source:  %s: %s%s\n", st.where, named, epoch)
		if !st.cfg.HasEngine(named) {
			problems = append(problems, fmt.Sprintf("the source names %q, which is not an engine of this config", named))
		}
	}
	running := map[string]int{}
	for _, m := range st.members {
		running[m.Engine]++
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ENGINE\tROLE\tPROCESSES\tSOURCE\tSECURITY\tHEALTH")
	var down []string
	for i, d := range st.engines {
		m := ""
		if d.Name == named {
			m = mark
		}
		procs := "unknown"
		if st.fleetKnown() {
			procs = fmt.Sprint(running[d.Name])
		}
		if d.Err != nil {
			down = append(down, d.Name)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", d.Name, role(i), procs, m, cfgops.Security(&st.cfg.Engines[i]), st.health(i, d))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(down) > 0 {
		problems = append(problems, fmt.Sprintf("%d engine(s) down: %s", len(down), strings.Join(down, ", ")))
	}
	problems = append(problems, st.printFleet(w, named)...)
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// printFleet lists the switchers the source knows and flags those that
// disagree with it, or says why it cannot; it returns the problems found.
func (st *statusReport) printFleet(w io.Writer, active string) []string {
	switch {
	case st.where == "":
		fmt.Fprintln(w, "\nfleet:   unknown: status cannot see where processes run without a source; each process switches\n"+
			"         on its own and announces itself nowhere")
		return nil
	case strings.HasPrefix(st.where, config.SourceFile+" "):
		fmt.Fprintln(w, "\nfleet:   unknown: status cannot see where processes run: a file source keeps no roster.\n"+
			"         Each process reads the file on its own host; after a breaker switch it may run on\n"+
			"         another engine than the file names. \"lockctl switch ENGINE\" moves every process\n"+
			"         watching this file to ENGINE, whatever the file named before.")
		return nil
	case st.srcErr != nil:
		fmt.Fprintln(w, "\nfleet:   unknown: the source did not answer")
		return nil
	case !st.roster:
		fmt.Fprintln(w, "\nfleet:   unknown: this source does not list the switchers watching it")
		return nil
	case st.rosterErr != nil:
		fmt.Fprintf(w, "\nfleet:   UNKNOWN: %v\n", st.rosterErr)
		return []string{"the fleet could not be listed"}
	}
	now := st.now
	if now.IsZero() {
		now = time.Now()
	}
	fmt.Fprintf(w, "\nfleet:   %d switcher(s) announced\n", len(st.members))
	if len(st.members) == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SWITCHER\tENGINE\tEPOCH\tREAD\tSINCE\tSEES DOWN\tAGREES")
	disagree := 0
	for _, m := range st.members {
		var why []string
		if active != "" && m.Engine != active {
			why = append(why, "on "+m.Engine+", the source names "+active)
		}
		// Above the source's version is fine: the engines' epoch records
		// outrank a source whose versions started again.
		if m.Epoch < st.value.Epoch {
			why = append(why, fmt.Sprintf("epoch %d, the source's is %d", m.Epoch, st.value.Epoch))
		}
		if active != "" && m.Desired != "" && m.Desired != active {
			why = append(why, "last read "+m.Desired)
		}
		agrees := "yes"
		if len(why) > 0 {
			disagree++
			agrees = "NO: " + strings.Join(why, "; ")
		}
		since := "-"
		if !m.Since.IsZero() {
			since = drill.Round(now.Sub(m.Since)).String() + " ago"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\n", m.ID, m.Engine, m.Epoch, orDash(m.Desired), since, orDash(strings.Join(m.Down, ",")), agrees)
	}
	_ = tw.Flush()
	if disagree > 0 {
		return []string{fmt.Sprintf("%d of %d switcher(s) disagree with the source", disagree, len(st.members))}
	}
	return nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// tokenNote says which token holders shows.
const tokenNote = `ENGINE TOKEN is the engine's own fencing token. An application that locks
through a switcher (config.Open) sees epoch<<44 | ENGINE TOKEN instead, with
the switch epoch of its process at the grant ("lockctl status" lists the
epochs of a fleet sharing an etcd or zk source).
`

func runHolders(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("holders", "--config FILE [--engine ENGINE] [--kind mutex|rw|semaphore] NAME",
		"  lockctl holders --config locks.yaml orders/42\n  lockctl holders --config locks.yaml --engine zk-backup orders/42\n  lockctl holders --config locks.yaml --kind semaphore exports\n", stderr)
	path := fs.String("config", "", "config `FILE`")
	engine := fs.String("engine", "", "inspect only this `ENGINE` (default: every engine that answers)")
	kindFlag := fs.String("kind", "mutex", "what NAME is: `mutex`, rw (a read-write lock) or semaphore")
	if err := fs.Parse(args); err != nil {
		return err
	}
	name, err := lockArg(fs.Args())
	if err != nil {
		return err
	}
	kind, err := parseKind(*kindFlag)
	if err != nil {
		return err
	}
	return eachEngine(*path, *engine, stdout, func(ctx context.Context, tw io.Writer, e locker.Engine) error {
		if kind != inspect.KindMutex {
			return printFamily(ctx, tw, e, kind, name)
		}
		return printMutex(ctx, tw, e, name)
	})
}

// eachEngine dials the engines of the config (or only engine), and prints
// one table with rows that print gives per engine that answered; an engine
// that did not answer, or whose print failed, gets an error row and makes
// the result incomplete.
func eachEngine(path, engine string, stdout io.Writer, print func(ctx context.Context, w io.Writer, e locker.Engine) error) error {
	cfg, d, err := dialEngineOp(path, engine)
	if err != nil {
		return err
	}
	defer d.close()
	ctx, cancel := opContext(cfg)
	defer cancel()

	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ENGINE\tROLE\tOWNER\tENGINE TOKEN\tTIME LEFT")
	var unreachable []string
	for _, dd := range d.engines.Dialed {
		if dd.Err != nil {
			unreachable = append(unreachable, dd.Name)
			fmt.Fprintf(tw, "%s\tunreachable\t%v\t\t\n", dd.Name, cause(dd.Err))
			continue
		}
		if err := print(ctx, tw, dd.Engine); err != nil {
			unreachable = append(unreachable, dd.Name)
			fmt.Fprintf(tw, "%s\terror\t%v\t\t\n", dd.Name, err)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprint(stdout, "\n"+tokenNote)
	if len(unreachable) > 0 {
		return fmt.Errorf("incomplete: %s did not answer", strings.Join(unreachable, ", "))
	}
	return nil
}

// printMutex prints the holder and waiters of the mutex name on e.
func printMutex(ctx context.Context, w io.Writer, e locker.Engine, name string) error {
	in, ok := e.(inspect.Inspector)
	if !ok {
		fmt.Fprintf(w, "%s\t-\tcannot inspect this engine\t\t\n", e.Name())
		return nil
	}
	info, err := in.Inspect(ctx, name)
	if err != nil {
		return err
	}
	if info.Holder == nil {
		fmt.Fprintf(w, "%s\tfree\t\t\t\n", e.Name())
	} else {
		fmt.Fprintf(w, "%s\tholder\t%s\t%d\t%s\n", e.Name(), info.Holder.Owner, info.Holder.Token, timeLeft(info.Holder.TTL))
	}
	for i, h := range info.Waiters {
		fmt.Fprintf(w, "%s\twaiter %d\t%s\t%d\t%s\n", e.Name(), i+1, h.Owner, h.Token, timeLeft(h.TTL))
	}
	if info.Subscribers > 0 {
		fmt.Fprintf(w, "%s\twaiting\t%d process(es) subscribed\t\t\n", e.Name(), info.Subscribers)
	}
	return nil
}

// dialEngineOp loads the config, checks the --engine flag against it
// before anything is dialled, and dials that engine, or every engine when
// it is "".
func dialEngineOp(path, engine string) (*config.Config, *dialed, error) {
	cfg, err := loadConfig(path)
	if err != nil {
		return nil, nil, err
	}
	var names []string
	if engine != "" {
		if !cfg.HasEngine(engine) {
			return nil, nil, fmt.Errorf("--engine: unknown engine %q (want one of %s)", engine, strings.Join(cfg.EngineNames(), ", "))
		}
		names = []string{engine}
	}
	d, err := dial(cfg, names, true, false)
	if err != nil {
		return nil, nil, err
	}
	return cfg, d, nil
}

func timeLeft(d time.Duration) string {
	if d <= 0 {
		return "session"
	}
	return drill.Round(d).String()
}

func lockArg(args []string) (string, error) {
	if len(args) != 1 {
		return "", fmt.Errorf("want exactly one lock NAME, got %d arguments", len(args))
	}
	return args[0], driver.ValidateName(args[0])
}

func runUnlock(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("unlock", "--force --config FILE [--engine ENGINE] [--kind mutex|rw|semaphore [--token T]] [--yes] NAME",
		"  lockctl unlock --force --config locks.yaml orders/42\n  lockctl unlock --force --yes --config locks.yaml --engine zk-backup orders/42\n  lockctl unlock --force --config locks.yaml --kind semaphore --token 1234 exports\n", stderr)
	path := fs.String("config", "", "config `FILE`")
	force := fs.Bool("force", false, "required: removing another owner's hold breaks its mutual exclusion")
	engine := fs.String("engine", "", "the `ENGINE` to clear; only it is dialled (default: the one engine that holds NAME)")
	kindFlag := fs.String("kind", "mutex", "what NAME is: `mutex`, rw (a read-write lock) or semaphore")
	token := fs.Uint64("token", 0, "with --kind rw or semaphore, end only the hold of this engine `TOKEN` (lockctl holders lists them; default: every hold)")
	yes := fs.Bool("yes", false, "do not ask for confirmation")
	if err := fs.Parse(args); err != nil {
		return err
	}
	name, err := lockArg(fs.Args())
	if err != nil {
		return err
	}
	kind, err := parseKind(*kindFlag)
	if err != nil {
		return err
	}
	if kind == inspect.KindMutex && *token != 0 {
		return errors.New("--token: only with --kind rw or semaphore (a mutex has one hold)")
	}
	if !*force {
		return errors.New("--force: required; the owner of the hold keeps running and will lose its lock")
	}
	cfg, d, err := dialEngineOp(*path, *engine)
	if err != nil {
		return err
	}
	defer d.close()
	ctx, cancel := opContext(cfg)
	defer cancel()
	h := heldFinder{kind: kind, name: name, token: *token}
	target, holds, err := pickHeld(ctx, d.engines, h)
	if err != nil {
		return err
	}
	if !*yes {
		fmt.Fprintf(stdout, "Remove %s of %q on %s? [y/N] ", holds, name, target.Name())
		answer, _ := bufio.NewReader(os.Stdin).ReadString('\n')
		if a := strings.ToLower(strings.TrimSpace(answer)); a != "y" && a != "yes" {
			return errors.New("not confirmed; nothing removed")
		}
	}
	// A fresh bound: the operator may have taken a while to answer.
	fctx, fcancel := opContext(cfg)
	defer fcancel()
	removed, err := h.force(fctx, target)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "removed %s of %q on %s\n", removed, name, target.Name())
	return nil
}

// heldFinder is what unlock clears: the mutex name, or the holds of the
// read-write lock or semaphore name (of token, or all when it is 0).
type heldFinder struct {
	kind  inspect.Kind
	name  string
	token uint64
}

// find describes the holds to clear on e ("" when there are none); ok is
// false when e cannot be inspected.
func (h heldFinder) find(ctx context.Context, e locker.Engine) (holds string, ok bool, err error) {
	if h.kind == inspect.KindMutex {
		in, ok := e.(inspect.Inspector)
		if !ok {
			return "", false, nil
		}
		info, err := in.Inspect(ctx, h.name)
		if err != nil || info.Holder == nil {
			return "", true, err
		}
		return describeHolds([]inspect.FamilyHolder{{Holder: *info.Holder, Kind: inspect.KindMutex}}), true, nil
	}
	in, ok := e.(inspect.FamilyInspector)
	if !ok {
		return "", false, nil
	}
	info, err := in.InspectFamily(ctx, h.kind, h.name)
	if err != nil {
		return "", true, err
	}
	var match []inspect.FamilyHolder
	for _, fh := range info.Holders {
		if h.token == 0 || fh.Token == h.token {
			match = append(match, fh)
		}
	}
	return describeHolds(match), true, nil
}

// force clears the holds on e and describes what it removed.
func (h heldFinder) force(ctx context.Context, e locker.Engine) (string, error) {
	if h.kind == inspect.KindMutex {
		removed, err := e.(inspect.Inspector).ForceUnlock(ctx, h.name)
		return describeHolds([]inspect.FamilyHolder{{Holder: removed, Kind: inspect.KindMutex}}), err
	}
	removed, err := e.(inspect.FamilyInspector).ForceUnlockFamily(ctx, h.kind, h.name, h.token)
	return describeHolds(removed), err
}

// describeHolds names holds for the operator: "the hold (owner O, engine
// token T)", or "2 holds (reader O1, engine token T1; ...)".
func describeHolds(hs []inspect.FamilyHolder) string {
	if len(hs) == 0 {
		return ""
	}
	parts := make([]string, len(hs))
	for i, h := range hs {
		role := "owner"
		if h.Kind != inspect.KindMutex {
			role = familyRole(h)
		}
		parts[i] = fmt.Sprintf("%s %s, engine token %d", role, h.Owner, h.Token)
	}
	if len(hs) == 1 {
		return "the hold (" + parts[0] + ")"
	}
	return fmt.Sprintf("%d holds (%s)", len(hs), strings.Join(parts, "; "))
}

// pickHeld finds the engine to clear: the only one dialled that holds
// what h names. With an engine that did not answer, it cannot know that the
// one it found is the only one, and asks for --engine.
func pickHeld(ctx context.Context, es *cfgops.Engines, h heldFinder) (locker.Engine, string, error) {
	var found []locker.Engine
	var holds, where, blind, down []string
	for _, d := range es.Dialed {
		if d.Err != nil {
			down = append(down, d.Name)
			continue
		}
		desc, ok, err := h.find(ctx, d.Engine)
		switch {
		case err != nil:
			return nil, "", fmt.Errorf("%s: %w", d.Name, err)
		case !ok:
			blind = append(blind, d.Name)
		case desc != "":
			found, holds = append(found, d.Engine), append(holds, desc)
			where = append(where, fmt.Sprintf("%s, %s", d.Name, desc))
		}
	}
	what := fmt.Sprintf("%q", h.name)
	if h.token != 0 {
		what = fmt.Sprintf("%q with engine token %d", h.name, h.token)
	}
	switch {
	case len(es.Dialed) == 1 && len(down) == 1:
		return nil, "", es.Dialed[0].Err
	case len(down) > 0:
		held := "not held on the engines that answered"
		if len(found) > 0 {
			held = "held on " + strings.Join(where, "; ")
		}
		return nil, "", fmt.Errorf("%s is %s, and %s did not answer: name the engine to clear with --engine", what, held, strings.Join(down, ", "))
	case len(found) == 0 && len(blind) > 0:
		return nil, "", fmt.Errorf("%s is not held on the engines that can be inspected (%s cannot be): %w", what, strings.Join(blind, ", "), locker.ErrNotHeld)
	case len(found) == 0:
		return nil, "", fmt.Errorf("%s is not held: %w", what, locker.ErrNotHeld)
	case len(found) > 1:
		return nil, "", fmt.Errorf("%s is held on %s: choose one with --engine", what, strings.Join(where, "; "))
	}
	return found[0], holds[0], nil
}

func runSwitch(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("switch", "--config FILE [--force] ENGINE",
		"  lockctl switch --config locks.yaml zk-backup\n  lockctl switch --config locks.yaml --force zk-backup   # even though zk-backup does not answer\n"+
			"  lockctl switch --config locks.yaml redis-main          # fail back after a breaker switch, even though the file names redis-main\n\n"+
			"Every process watching the source moves to ENGINE, whatever it named before: an etcd key or zk\n"+
			"node is written again (a new version and epoch), a file that names ENGINE already is rewritten\n"+
			"unchanged, which its watchers apply again. A process that cannot reach ENGINE yet follows once\n"+
			"ENGINE passes its health checks. The output says who moves: the switchers an etcd or zk source\n"+
			"lists, per engine; a file source lists none (processes on other hosts read their own copy).\n", stderr)
	path := fs.String("config", "", "config `FILE`")
	force := fs.Bool("force", false, "write the source even when ENGINE does not answer")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return fmt.Errorf("want exactly one ENGINE name, got %d arguments", fs.NArg())
	}
	target := fs.Arg(0)
	cfg, err := loadConfig(*path)
	if err != nil {
		return err
	}
	if !cfg.HasEngine(target) {
		return fmt.Errorf("unknown engine %q (want one of %s)", target, strings.Join(cfg.EngineNames(), ", "))
	}
	if cfg.Source.Type == config.SourceNone {
		return errors.New("--config: source.type is none: there is no source to write (use file, etcd or zk)")
	}
	d, err := dial(cfg, []string{target}, false, true)
	if err != nil {
		return err
	}
	defer d.close()
	if d.srcErr != nil {
		return d.srcErr
	}
	if te := d.engines.Dialed[0].Err; te != nil {
		if !*force {
			return fmt.Errorf("%s does not answer, so nothing was written (--force to switch to it anyway): %w", target, te)
		}
		fmt.Fprintf(stderr, "lockctl switch: %s does not answer; switching anyway (--force): %v\n", target, te)
	}
	ctx, cancel := opContext(cfg)
	defer cancel()
	setter, ok := d.source.Source().(switcher.Setter)
	if !ok {
		return fmt.Errorf("the %s source cannot be written", d.source.Kind())
	}
	was, wasErr := "", error(nil)
	if v, err := d.source.Read(ctx); err == nil {
		was = v.Engine
	} else {
		wasErr = err
	}
	var fleet []switcher.Member
	var fleetErr error
	roster, hasRoster := d.source.Source().(switcher.Roster)
	if hasRoster {
		fleet, fleetErr = roster.Members(ctx)
	}
	if err := setter.Set(ctx, target); err != nil {
		return err
	}
	reportSwitch(ctx, stdout, d.source, target, was, wasErr)
	fmt.Fprint(stdout, whoMoves(d.source.Kind(), target, hasRoster, fleet, fleetErr))
	return nil
}

// reportSwitch says what the switch to target wrote over: was, what the
// source named before (wasErr when that could not be read).
func reportSwitch(ctx context.Context, stdout io.Writer, src *cfgops.SourceHandle, target, was string, wasErr error) {
	epoch := ""
	if v, err := src.Read(ctx); err == nil && v.Epoch > 0 {
		epoch = fmt.Sprintf(", epoch %d", v.Epoch)
	}
	where := src.Kind() + " " + src.Where()
	switch {
	case wasErr != nil:
		fmt.Fprintf(stdout, "switched: %s now names %s%s (what it named before could not be read: %v)\n", where, target, epoch, wasErr)
	case was == target && src.Kind() == config.SourceFile:
		fmt.Fprintf(stdout, "switched: %s already named %s: rewrote it unchanged, which every process watching it applies again\n", where, target)
	case was == target:
		fmt.Fprintf(stdout, "switched: %s already named %s: wrote it again%s, which every switcher watching it applies\n", where, target, epoch)
	case was == "":
		fmt.Fprintf(stdout, "switched: %s now names %s (it named no engine before)%s\n", where, target, epoch)
	default:
		fmt.Fprintf(stdout, "switched: %s now names %s (was %s)%s\n", where, target, was, epoch)
	}
}

// whoMoves says which processes a switch to target moves: every switcher
// watching the source, those on another engine to target, those on target
// to the source's new epoch; with the fleet listed when the source keeps a
// roster.
func whoMoves(kind, target string, hasRoster bool, fleet []switcher.Member, fleetErr error) string {
	var b strings.Builder
	switch {
	case kind == config.SourceFile:
		fmt.Fprintf(&b, "moves:    every process watching this file on this host, wherever it runs now (a breaker may have moved it), to %s.\n"+
			"          lockctl cannot list them: a file source keeps no roster, and processes on other hosts read their own copy of the file.\n", target)
	case !hasRoster:
		fmt.Fprintf(&b, "moves:    every switcher watching the %s source, to %s; this source lists none of them.\n", kind, target)
	case fleetErr != nil:
		fmt.Fprintf(&b, "moves:    every switcher watching the source, to %s; the fleet could not be listed: %v\n", target, fleetErr)
	case len(fleet) == 0:
		fmt.Fprintf(&b, "moves:    no switcher is announced on the source; processes that start later begin on %s.\n", target)
	default:
		on := map[string]int{}
		for _, m := range fleet {
			on[m.Engine]++
		}
		var parts []string
		for _, e := range slices.Sorted(maps.Keys(on)) {
			if e == target {
				parts = append(parts, fmt.Sprintf("%d already on %s take the new epoch", on[e], e))
			} else {
				parts = append(parts, fmt.Sprintf("%d on %s move to %s", on[e], e, target))
			}
		}
		fmt.Fprintf(&b, "moves:    the %d switcher(s) announced: %s.\n", len(fleet), strings.Join(parts, "; "))
	}
	fmt.Fprintf(&b, "          A process that cannot reach %s yet stays where it is until %s passes its health checks, then moves.\n", target, target)
	return b.String()
}
