// Package drill runs a failover drill: many workers take and release locks
// on many names through a switcher while faults are injected, and every
// hold is checked — no two holders of a name on one engine, tokens
// increasing per name and engine, every hold released on the engine that
// granted it. The e2e tests and lockctl drill share it.
package drill

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/orthrus-go/orthrus/internal/deadline"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/switcher"
)

// Config is one drill. Zero fields take the defaults of lockctl drill.
type Config struct {
	Workers  int           // concurrent owners; default 16
	Names    int           // distinct lock names; default 64
	Duration time.Duration // how long the load runs; default 20s
	Hold     time.Duration // time inside each critical section; default 2ms
	TTL      time.Duration // TTL of each hold (renewed); default 5s
	Wait     time.Duration // LockCtx budget of one acquisition; default 10s
	Prefix   string        // lock name prefix; default "drill/"
	Faults   []Fault       // injected during the run
	// Progress, if set, is called every Tick with the state so far.
	Progress func(Snapshot)
	Tick     time.Duration // default 250ms; also the timeline's bucket width
	// Start, when in the future, is when the load starts: the processes of
	// a fleet drill share it, so that their timelines line up.
	Start time.Time
	// KeepGrants keeps every grant in Report.Grants, for Merge.
	KeepGrants bool
}

// Fault is something done to the engines at a point of the drill.
type Fault struct {
	At   time.Duration
	Name string // e.g. "kill primary"
	Do   func() error
	// Kind is its mark's: KindFault (the default) or KindPlanned.
	Kind string
}

// The kinds of Mark.
const (
	KindFault   = "fault"   // something done to an engine
	KindPlanned = "planned" // a switch asked for, not forced by a fault
	KindSwitch  = "switch"  // a switch that happened
)

// Mark is a fault, a planned switch or a switch on the drill's timeline.
type Mark struct {
	At     time.Duration `json:"at"`
	Label  string        `json:"label"`
	Kind   string        `json:"kind"` // KindFault, KindPlanned or KindSwitch
	Detail string        `json:"detail,omitempty"`
	To     string        `json:"to,omitempty"` // a switch's new engine
}

// Bucket is one tick of the timeline.
type Bucket struct {
	At       time.Duration    `json:"at"`
	Acquired map[string]int64 `json:"acquired"` // grants per engine
	Failed   int64            `json:"failed"`   // acquisitions that failed
	// P50 and P99 are the acquisition latencies (from the call to the
	// grant) of the tick's grants; 0 when there were none.
	P50 time.Duration `json:"p50"`
	P99 time.Duration `json:"p99"`
	// Current is the engine current at the end of the tick; Breakers the
	// breaker state of each engine then, in Report.Engines order. Empty in
	// a merged fleet timeline: see Fleet.Processes.
	Current  string   `json:"current,omitempty"`
	Breakers []string `json:"breakers,omitempty"`
}

// Grant is one acquisition granted, as a fenced resource would see its
// write.
type Grant struct {
	At     time.Duration `json:"at"`
	Name   string        `json:"name"`
	Token  uint64        `json:"token"`
	Engine string        `json:"engine"`
	Wait   time.Duration `json:"wait"`
}

// Report is the outcome of a drill.
type Report struct {
	Started       time.Time        `json:"started"`
	Duration      time.Duration    `json:"duration"`
	Engines       []string         `json:"engines"`
	Workers       int              `json:"workers"`
	Names         int              `json:"names"`
	Acquired      map[string]int64 `json:"acquired"`
	Failed        int64            `json:"failed"`
	Retried       int64            `json:"retried"`
	Lost          int64            `json:"lost"`
	UnlockErrors  int64            `json:"unlock_errors"`
	SwitchLatency time.Duration    `json:"switch_latency"` // first fault or planned switch to the first switch after it; -1 if none
	Marks         []Mark           `json:"marks"`
	Timeline      []Bucket         `json:"timeline"`
	Tick          time.Duration    `json:"tick"`
	Violations    []string         `json:"violations"`
	Errors        []string         `json:"errors"`  // a sample of failed acquisitions
	Initial       string           `json:"initial"` // the engine current at the start
	// Process names the process in a fleet drill.
	Process string `json:"process,omitempty"`
	// Grants are every grant, with Config.KeepGrants.
	Grants []Grant `json:"grants,omitempty"`
	// Fleet holds the figures of a fleet drill (Merge).
	Fleet *Fleet `json:"fleet,omitempty"`
	// Setup is what the drill ran against; the caller of Run fills it in.
	Setup Setup `json:"setup"`
}

// Setup is what a drill ran against, as its report names it: never a
// secret.
type Setup struct {
	// Config is the config file drilled, "" for engines lockctl started.
	Config string `json:"config"`
	// Source is the watched key or file that names the active engine, ""
	// without one.
	Source  string   `json:"source,omitempty"`
	Targets []Target `json:"targets"`
}

// Target is one engine drilled.
type Target struct {
	Name  string   `json:"name"`
	Type  string   `json:"type"`  // redis, zk, etcd or mem
	Addrs []string `json:"addrs"` // none in memory
	// Security is how it connects and authenticates, without the secrets
	// (cfgops.Security in cmd/lockctl).
	Security string `json:"security,omitempty"`
}

// OK reports whether every check passed.
func (r *Report) OK() bool { return len(r.Violations) == 0 }

// Snapshot is the live state of a running drill.
type Snapshot struct {
	Elapsed  time.Duration
	Current  string
	Rate     map[string]float64 // acquisitions per second in the last tick
	Acquired map[string]int64
	Failed   int64
	Lost     int64
	Engines  []switcher.EngineState
}

const maxListed = 50 // violations and errors kept in a report

// Drill collects the checks of one run. Wire OnSwitch into the switcher
// (switcher.OnSwitch(d.OnSwitch)) before calling Run.
type Drill struct {
	cfg Config

	mu       sync.Mutex
	started  time.Time
	holder   map[string]int    // engine+name -> worker holding it
	last     map[string]uint64 // engine+name -> last token
	report   Report
	bucket   map[string]int64
	waits    []time.Duration // latencies of the bucket's grants
	failedN  int64           // failures in the bucket
	firstHit time.Duration   // first fault
}

// New returns a drill with cfg's defaults filled in.
func New(cfg Config) *Drill {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	defD := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&cfg.Workers, 16)
	def(&cfg.Names, 64)
	defD(&cfg.Duration, 20*time.Second)
	defD(&cfg.Hold, 2*time.Millisecond)
	defD(&cfg.TTL, 5*time.Second)
	defD(&cfg.Wait, 10*time.Second)
	defD(&cfg.Tick, 250*time.Millisecond)
	if cfg.Prefix == "" {
		cfg.Prefix = "drill/"
	}
	return &Drill{
		cfg:      cfg,
		holder:   make(map[string]int),
		last:     make(map[string]uint64),
		bucket:   make(map[string]int64),
		firstHit: -1,
		report: Report{
			Workers: cfg.Workers, Names: cfg.Names, Tick: cfg.Tick,
			Acquired: make(map[string]int64), SwitchLatency: -1,
		},
	}
}

// SetFaults sets the faults to inject; call it before Run. It lets a caller
// build its faults around the switcher, which needs OnSwitch first.
func (d *Drill) SetFaults(faults []Fault) { d.cfg.Faults = faults }

// SetStart sets Config.Start; call it before Run.
func (d *Drill) SetStart(t time.Time) { d.cfg.Start = t }

// OnSwitch records a switch; pass it to switcher.OnSwitch.
func (d *Drill) OnSwitch(ev switcher.Event) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.started.IsZero() {
		return
	}
	at := ev.At.Sub(d.started)
	d.report.Marks = append(d.report.Marks, Mark{At: at, Kind: KindSwitch, Label: ev.From + " → " + ev.To, Detail: string(ev.Reason), To: ev.To})
	if d.firstHit >= 0 && d.report.SwitchLatency < 0 && at >= d.firstHit {
		d.report.SwitchLatency = at - d.firstHit
	}
}

// Run runs the drill against sw until cfg.Duration has passed or ctx is done.
func (d *Drill) Run(ctx context.Context, sw *switcher.Switcher) (*Report, error) {
	if d.cfg.Names < 1 || d.cfg.Workers < 1 {
		return nil, fmt.Errorf("drill: %w: workers and names must be positive", locker.ErrInvalidArgument)
	}
	for _, st := range sw.States() {
		d.report.Engines = append(d.report.Engines, st.Name)
	}
	if wait := time.Until(d.cfg.Start); wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
	}
	retried0 := sw.Retried()
	// The load's deadline and its origin are one reading of the clock:
	// a deadline taken before the origin made the drill end short of
	// Duration on a loaded machine.
	now := time.Now()
	ctx, cancel := context.WithDeadline(ctx, now.Add(d.cfg.Duration))
	defer cancel()
	d.mu.Lock()
	d.started = now
	if !d.cfg.Start.IsZero() && d.cfg.Start.Before(d.started) {
		d.started = d.cfg.Start // late: keep the shared origin
	}
	d.report.Started = d.started
	d.report.Initial = sw.Current()
	d.mu.Unlock()

	var wg sync.WaitGroup
	for w := 1; w <= d.cfg.Workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d.work(ctx, sw, w)
		}()
	}
	for _, f := range d.cfg.Faults {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d.inject(ctx, f)
		}()
	}
	d.tick(ctx, sw)
	// The load ends here; a fault may take longer to return (an embedded
	// etcd server takes seconds to stop), which is not the drill's time.
	end := time.Since(d.started)
	wg.Wait()

	current, states := sw.Current(), sw.States()
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closeLast(end, current, states)
	d.report.Duration = end
	d.report.Retried = sw.Retried() - retried0
	sort.Slice(d.report.Marks, func(i, j int) bool { return d.report.Marks[i].At < d.report.Marks[j].At })
	r := d.report
	return &r, nil
}

func (d *Drill) inject(ctx context.Context, f Fault) {
	t := time.NewTimer(f.At)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return
	case <-t.C:
	}
	d.mu.Lock()
	at := time.Since(d.started)
	if d.firstHit < 0 {
		d.firstHit = at
	}
	d.mu.Unlock()
	err := f.Do()
	d.mu.Lock()
	defer d.mu.Unlock()
	m := Mark{At: at, Kind: cmp.Or(f.Kind, KindFault), Label: f.Name}
	if err != nil {
		m.Detail = err.Error()
	}
	d.report.Marks = append(d.report.Marks, m)
}

// tick closes a timeline bucket and reports progress every Tick.
func (d *Drill) tick(ctx context.Context, sw *switcher.Switcher) {
	t := time.NewTicker(d.cfg.Tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		current, states := sw.Current(), sw.States()
		d.mu.Lock()
		rates := make(map[string]float64, len(d.bucket))
		for e, n := range d.bucket {
			rates[e] = float64(n) / d.cfg.Tick.Seconds()
		}
		d.closeBucket(current, states)
		snap := Snapshot{
			Elapsed: time.Since(d.started), Rate: rates, Current: current, Engines: states,
			Acquired: copyMap(d.report.Acquired), Failed: d.report.Failed, Lost: d.report.Lost,
		}
		d.mu.Unlock()
		if d.cfg.Progress != nil {
			d.cfg.Progress(snap)
		}
	}
}

// closeBucket appends the current bucket to the timeline, with the
// switcher's state at its end. Called with d.mu.
func (d *Drill) closeBucket(current string, states []switcher.EngineState) {
	at := time.Duration(len(d.report.Timeline)) * d.cfg.Tick
	b := Bucket{At: at, Acquired: d.bucket, Failed: d.failedN, Current: current}
	b.P50, b.P99 = percentiles(d.waits)
	for _, st := range states {
		b.Breakers = append(b.Breakers, st.Breaker.String())
	}
	d.report.Timeline = append(d.report.Timeline, b)
	d.bucket, d.waits, d.failedN = make(map[string]int64), d.waits[:0], 0
}

// closeLast closes the last bucket at end. One that began less than half a
// tick before the end joins the bucket before it: a rate over a sliver of
// time means nothing. Called with d.mu.
func (d *Drill) closeLast(end time.Duration, current string, states []switcher.EngineState) {
	n := len(d.report.Timeline)
	if n == 0 || end-time.Duration(n)*d.cfg.Tick >= d.cfg.Tick/2 {
		d.closeBucket(current, states)
		return
	}
	prev := &d.report.Timeline[n-1]
	for e, c := range d.bucket {
		prev.Acquired[e] += c
	}
	prev.Failed += d.failedN
}

// Round rounds d for people: to the microsecond under a millisecond, to
// the millisecond under 10 seconds, to a tenth of a second under a minute,
// to the second beyond.
func Round(d time.Duration) time.Duration {
	switch a := max(d, -d); {
	case a < time.Millisecond:
		return d.Round(time.Microsecond)
	case a < 10*time.Second:
		return d.Round(time.Millisecond)
	case a < time.Minute:
		return d.Round(100 * time.Millisecond)
	}
	return d.Round(time.Second)
}

// percentiles returns the 50th and 99th percentiles of waits (sorted in
// place); 0, 0 for none.
func percentiles(waits []time.Duration) (p50, p99 time.Duration) {
	if len(waits) == 0 {
		return 0, 0
	}
	slices.Sort(waits)
	at := func(q float64) time.Duration { return waits[min(len(waits)-1, int(q*float64(len(waits))))] }
	return at(0.50), at(0.99)
}

func copyMap(m map[string]int64) map[string]int64 {
	c := make(map[string]int64, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

func (d *Drill) violation(format string, args ...any) {
	if len(d.report.Violations) < maxListed {
		d.report.Violations = append(d.report.Violations, fmt.Sprintf(format, args...))
	}
}

// over reports whether the drill's load has ended, by the rule the lock's
// Core judges deadlines with: an acquisition bounded by the same deadline
// can end with DeadlineExceeded before ctx's timer fires, which is the
// drill ending, not a failed acquisition.
func over(ctx context.Context) bool { return deadline.Err(ctx) != nil }

func (d *Drill) work(ctx context.Context, sw *switcher.Switcher, worker int) {
	for !over(ctx) {
		name := fmt.Sprintf("%s%d", d.cfg.Prefix, rand.IntN(d.cfg.Names))
		l, err := sw.NewLocker(name, locker.WithTTL(d.cfg.TTL))
		if err != nil {
			d.failed(err)
			return
		}
		wctx, cancel := context.WithTimeout(ctx, d.cfg.Wait)
		t0 := time.Now()
		err = l.LockCtx(wctx)
		wait := time.Since(t0)
		cancel()
		if err != nil {
			if !over(ctx) {
				d.failed(fmt.Errorf("%s: %w", name, err))
			}
			continue
		}
		d.hold(ctx, l, worker, wait)
		if err := l.Unlock(); err != nil {
			d.mu.Lock()
			if errors.Is(err, locker.ErrLockLost) {
				d.report.Lost++
			} else {
				d.report.UnlockErrors++
			}
			d.mu.Unlock()
		}
	}
}

func (d *Drill) failed(err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.report.Failed++
	d.failedN++
	if len(d.report.Errors) < maxListed {
		d.report.Errors = append(d.report.Errors, err.Error())
	}
}

// hold runs one critical section and checks it.
func (d *Drill) hold(ctx context.Context, l locker.Lease, worker int, wait time.Duration) {
	engine, token := l.Engine(), l.Token()
	key := engine + "\x00" + l.Name()
	d.mu.Lock()
	if other, held := d.holder[key]; held {
		d.violation("%q held by workers %d and %d at once on %s", l.Name(), other, worker, engine)
	}
	if token <= d.last[key] {
		d.violation("%q on %s: token %d after %d (not increasing)", l.Name(), engine, token, d.last[key])
	}
	d.holder[key], d.last[key] = worker, token
	d.report.Acquired[engine]++
	d.bucket[engine]++
	d.waits = append(d.waits, wait)
	if d.cfg.KeepGrants {
		d.report.Grants = append(d.report.Grants, Grant{At: time.Since(d.started), Name: l.Name(), Token: l.Token(), Engine: engine, Wait: wait})
	}
	d.mu.Unlock()

	t := time.NewTimer(d.cfg.Hold)
	select {
	case <-t.C:
	case <-l.Lost():
	case <-ctx.Done():
	}
	t.Stop()

	d.mu.Lock()
	if d.holder[key] == worker {
		delete(d.holder, key)
	}
	if now := l.Engine(); now != engine {
		d.violation("%q granted on %s but released through %s", l.Name(), engine, now)
	}
	d.mu.Unlock()
}
