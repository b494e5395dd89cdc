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

// ElectObserver reports leader elections (package elect) to
// OpenTelemetry: give it to each candidate with elect.WithObserver. Its
// metrics, beside the locks':
//
//   - orthrus.elect.terms: leaderships won by this process's candidates;
//   - orthrus.elect.term.duration: leaderships ended, by end (resigned,
//     lost) and how long they lasted;
//   - orthrus.elect.leading: leaderships this process holds now;
//   - orthrus.elect.campaign.duration: how long Campaign blocked, by
//     result (won, cancelled, error).
//
// Each is labelled with engine, the name of the engine or switcher the
// candidate was made on. Election names are labels only under
// WithLockNames, mapped as lock names are. Why a hold was lost is
// orthrus.lock.lost's cause, on engines that report to the Telemetry.
type ElectObserver struct {
	sets     jobSets
	terms    metric.Int64Counter
	termTime metric.Float64Histogram
	leading  metric.Int64UpDownCounter
	campaign metric.Float64Histogram
}

var _ elect.Observer = (*ElectObserver)(nil)

// Elect returns the observer of leader elections, over the same provider
// as t. It fails when the meter provider refuses an instrument.
func (t *Telemetry) Elect() (*ElectObserver, error) {
	o := &ElectObserver{sets: jobSets{nameLabel: t.nameLabel}}
	var errs []error
	var err error
	o.terms, err = t.meter.Int64Counter("orthrus.elect.terms", metric.WithUnit("{term}"),
		metric.WithDescription("Leaderships won by candidates of this process."))
	errs = append(errs, err)
	o.termTime, err = t.meter.Float64Histogram("orthrus.elect.term.duration", metric.WithUnit("s"),
		metric.WithDescription("Leaderships ended, by end (resigned, lost), and how long each lasted."),
		metric.WithExplicitBucketBoundaries(HoldBuckets...))
	errs = append(errs, err)
	o.leading, err = t.meter.Int64UpDownCounter("orthrus.elect.leading", metric.WithUnit("{term}"),
		metric.WithDescription("Leaderships held now by candidates of this process."))
	errs = append(errs, err)
	o.campaign, err = t.meter.Float64Histogram("orthrus.elect.campaign.duration", metric.WithUnit("s"),
		metric.WithDescription("How long campaigns blocked, by result: won, cancelled, error."),
		metric.WithExplicitBucketBoundaries(HoldBuckets...))
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("telemetry: Elect: %w", err)
	}
	return o, nil
}

// Campaigned implements elect.Observer.
func (o *ElectObserver) Campaigned(e elect.CampaignEvent) {
	ctx := context.Background()
	o.campaign.Record(ctx, e.Took.Seconds(), o.sets.of(e.Engine, e.Name, keyResult, e.Result.String()))
	if e.Result == elect.CampaignWon {
		set := o.sets.of(e.Engine, e.Name, "", "")
		o.terms.Add(ctx, 1, set)
		o.leading.Add(ctx, 1, set)
	}
}

// TermEnded implements elect.Observer.
func (o *ElectObserver) TermEnded(e elect.TermEvent) {
	ctx := context.Background()
	o.leading.Add(ctx, -1, o.sets.of(e.Engine, e.Name, "", ""))
	o.termTime.Record(ctx, e.Held.Seconds(), o.sets.of(e.Engine, e.Name, keyEnd, e.End.String()))
}

// RunOnceObserver reports run-once jobs (package runonce) to
// OpenTelemetry: give it to each Runner with runonce.WithObserver. Its
// metrics, beside the locks':
//
//   - orthrus.runonce.runs: runs by outcome: ran, skipped (another owner
//     held the name), failed (the job returned an error), cut_short (the
//     hold was lost before the job returned: it ran past AtMostFor), error
//     (neither ran nor skipped: the engine failed, bad input, a closed
//     Runner);
//   - orthrus.runonce.run.duration: the job's time from the grant to its
//     return, by outcome (ran, failed, cut_short).
//
// Each is labelled with engine, the name of the engine or switcher the
// Runner was made on. Job names are labels only under WithLockNames,
// mapped as lock names are.
type RunOnceObserver struct {
	sets     jobSets
	runs     metric.Int64Counter
	duration metric.Float64Histogram
}

var _ runonce.Observer = (*RunOnceObserver)(nil)

// RunOnce returns the observer of run-once jobs, over the same provider
// as t. It fails when the meter provider refuses an instrument.
func (t *Telemetry) RunOnce() (*RunOnceObserver, error) {
	o := &RunOnceObserver{sets: jobSets{nameLabel: t.nameLabel}}
	var err1, err2 error
	o.runs, err1 = t.meter.Int64Counter("orthrus.runonce.runs", metric.WithUnit("{run}"),
		metric.WithDescription("Runs of run-once jobs, by outcome: ran, skipped, failed, cut_short, error."))
	o.duration, err2 = t.meter.Float64Histogram("orthrus.runonce.run.duration", metric.WithUnit("s"),
		metric.WithDescription("The time of run-once jobs that ran, from the grant to the job's return, by outcome: ran, failed, cut_short."),
		metric.WithExplicitBucketBoundaries(HoldBuckets...))
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("telemetry: RunOnce: %w", err)
	}
	return o, nil
}

// Ran implements runonce.Observer.
func (o *RunOnceObserver) Ran(e runonce.RunEvent) {
	ctx := context.Background()
	set := o.sets.of(e.Engine, e.Name, keyOutcome, e.Outcome.String())
	o.runs.Add(ctx, 1, set)
	switch e.Outcome {
	case runonce.OutcomeRan, runonce.OutcomeFailed, runonce.OutcomeCutShort:
		o.duration.Record(ctx, e.Took.Seconds(), set)
	}
}
