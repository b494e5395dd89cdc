package telemetry

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/orthrus-go/orthrus/elect"
	"github.com/orthrus-go/orthrus/runonce"
)

// jobKey identifies one attribute set of the elections' and the run-once
// jobs' metrics: the engine, the name label, and one more label.
type jobKey struct {
	engine, name string
	key          attribute.Key // "" for none
	value        string
}

// jobSets makes each attribute set once, as the lock metrics do: a fresh
// option on every measurement would allocate.
type jobSets struct {
	nameLabel func(string) string // WithLockNames; nil: no name label
	sets      sync.Map            // jobKey → metric.MeasurementOption
}

// of returns the set of engine, the label of name (only under
// WithLockNames), and key=value when key is not "".
func (j *jobSets) of(engine, name string, key attribute.Key, value string) metric.MeasurementOption {
	k := jobKey{engine: engine, key: key, value: value}
	if j.nameLabel != nil && name != "" {
		k.name = j.nameLabel(name)
	}
	if s, ok := j.sets.Load(k); ok {
		return s.(metric.MeasurementOption)
	}
	kv := []attribute.KeyValue{keyEngine.String(engine)}
	if k.name != "" {
		kv = append(kv, keyName.String(k.name))
	}
	if key != "" {
		kv = append(kv, key.String(value))
	}
	s, _ := j.sets.LoadOrStore(k, metric.WithAttributeSet(attribute.NewSet(kv...)))
	return s.(metric.MeasurementOption)
}

// instruments makes the instruments of an observer on m, and gathers the
// meter provider's refusals.
type instruments struct {
	m    metric.Meter
	errs []error
}

func (in *instruments) counter(name, unit, desc string) metric.Int64Counter {
	c, err := in.m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
	in.errs = append(in.errs, err)
	return c
}

func (in *instruments) updown(name, unit, desc string) metric.Int64UpDownCounter {
	c, err := in.m.Int64UpDownCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
	in.errs = append(in.errs, err)
	return c
}

// seconds is a histogram of durations, from 1 ms to an hour (HoldBuckets).
func (in *instruments) seconds(name, desc string) metric.Float64Histogram {
	h, err := in.m.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc),
		metric.WithExplicitBucketBoundaries(HoldBuckets...))
	in.errs = append(in.errs, err)
	return h
}

// JobObserver reports leader elections (package elect) and run-once jobs
// (package runonce) to OpenTelemetry: give it to each candidate with
// elect.WithObserver and to each Runner with runonce.WithObserver. Its
// metrics, beside the locks':
//
//   - orthrus.elect.terms: leaderships won by this process's candidates;
//   - orthrus.elect.term.duration: leaderships ended, by end (resigned,
//     lost), and how long they lasted;
//   - orthrus.elect.leading: leaderships this process holds now;
//   - orthrus.elect.campaign.duration: how long Campaign blocked, by
//     result (won, cancelled, error);
//   - orthrus.runonce.runs: runs by outcome: ran, skipped (another owner
//     held the name), failed (the job returned an error), cut_short (the
//     hold was lost before the job returned: it ran past AtMostFor), error
//     (neither ran nor skipped: the engine failed, bad input, a closed
//     Runner);
//   - orthrus.runonce.run.duration: the job's time from the grant to its
//     return, by outcome (ran, failed, cut_short).
//
// Each is labelled with engine, the name of the engine or switcher the
// candidate or Runner was made on. Election and job names are labels only
// under WithLockNames, mapped as lock names are. Why a leadership's hold
// was lost is orthrus.lock.lost's cause, on engines that report to the
// Telemetry.
type JobObserver struct {
	sets     jobSets
	terms    metric.Int64Counter
	termTime metric.Float64Histogram
	leading  metric.Int64UpDownCounter
	campaign metric.Float64Histogram
	runs     metric.Int64Counter
	runTime  metric.Float64Histogram
}

var (
	_ elect.Observer   = (*JobObserver)(nil)
	_ runonce.Observer = (*JobObserver)(nil)
)

// Jobs returns the observer of leader elections and run-once jobs, over
// the same provider as t. It fails when the meter provider refuses an
// instrument.
func (t *Telemetry) Jobs() (*JobObserver, error) {
	in := instruments{m: t.meter}
	o := &JobObserver{
		sets:  jobSets{nameLabel: t.nameLabel},
		terms: in.counter("orthrus.elect.terms", "{term}", "Leaderships won by candidates of this process."),
		termTime: in.seconds("orthrus.elect.term.duration",
			"Leaderships ended, by end (resigned, lost), and how long each lasted."),
		leading: in.updown("orthrus.elect.leading", "{term}", "Leaderships held now by candidates of this process."),
		campaign: in.seconds("orthrus.elect.campaign.duration",
			"How long campaigns blocked, by result: won, cancelled, error."),
		runs: in.counter("orthrus.runonce.runs", "{run}",
			"Runs of run-once jobs, by outcome: ran, skipped, failed, cut_short, error."),
		runTime: in.seconds("orthrus.runonce.run.duration",
			"The time of run-once jobs that ran, from the grant to the job's return, by outcome: ran, failed, cut_short."),
	}
	if err := errors.Join(in.errs...); err != nil {
		return nil, fmt.Errorf("telemetry: Jobs: %w", err)
	}
	return o, nil
}

// Campaigned implements elect.Observer.
func (o *JobObserver) Campaigned(e elect.CampaignEvent) {
	ctx := context.Background()
	o.campaign.Record(ctx, e.Took.Seconds(), o.sets.of(e.Engine, e.Name, keyResult, string(e.Result)))
	if e.Result == elect.CampaignWon {
		set := o.sets.of(e.Engine, e.Name, "", "")
		o.terms.Add(ctx, 1, set)
		o.leading.Add(ctx, 1, set)
	}
}

// TermEnded implements elect.Observer.
func (o *JobObserver) TermEnded(e elect.TermEvent) {
	ctx := context.Background()
	o.leading.Add(ctx, -1, o.sets.of(e.Engine, e.Name, "", ""))
	o.termTime.Record(ctx, e.Held.Seconds(), o.sets.of(e.Engine, e.Name, keyEnd, string(e.End)))
}

// Ran implements runonce.Observer.
func (o *JobObserver) Ran(e runonce.RunEvent) {
	ctx := context.Background()
	set := o.sets.of(e.Engine, e.Name, keyOutcome, string(e.Outcome))
	o.runs.Add(ctx, 1, set)
	switch e.Outcome {
	case runonce.OutcomeRan, runonce.OutcomeFailed, runonce.OutcomeCutShort:
		o.runTime.Record(ctx, e.Took.Seconds(), set)
	}
}
