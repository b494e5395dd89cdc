package telemetry

import (
	"maps"
	"sync/atomic"

	"github.com/orthrus-go/orthrus/locker/observe"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// outcomes are the results an acquisition can have, in the order of
// attrSets.result.
var outcomes = [...]observe.Outcome{
	observe.OutcomeGranted, observe.OutcomeContended, observe.OutcomeTimeout,
	observe.OutcomeCancelled, observe.OutcomeUnavailable, observe.OutcomeError,
}

func outcomeIndex(o observe.Outcome) int {
	for i, x := range outcomes {
		if x == o {
			return i
		}
	}
	return len(outcomes) - 1 // an outcome this package does not know counts as an error
}

// causes are the causes of a lost hold, in the order of attrSets.lostCause.
var causes = [...]observe.LostCause{
	observe.LostExpired, observe.LostGone, observe.LostLeaseEnd, observe.LostEngine, observe.LostClosed,
}

func causeIndex(c observe.LostCause) int {
	for i, x := range causes {
		if x == c {
			return i
		}
	}
	return len(causes) - 1
}

// opts is one attribute set as the options of Add and Record, made once:
// passing a fresh option on every call would allocate.
type opts struct {
	add []metric.AddOption
	rec []metric.RecordOption
	obs []metric.ObserveOption
}

func newOpts(kv ...attribute.KeyValue) opts {
	o := metric.WithAttributeSet(attribute.NewSet(kv...))
	return opts{add: []metric.AddOption{o}, rec: []metric.RecordOption{o}, obs: []metric.ObserveOption{o}}
}

// attrKey identifies the attribute sets of one engine, or of one engine
// through one switcher, and one lock name label.
type attrKey struct {
	engine, switcher, name string
}

// attrSets are every attribute set the metrics of one attrKey use, and
// its holds and waiters.
type attrSets struct {
	holds, waiters atomic.Int64
	counted        atomic.Bool // holds or waiters were counted: observe them

	engine    opts // engine (and name): holds, waiters
	result    [len(outcomes)]opts
	swResult  [len(outcomes)]opts // switcher and result: the switcher's waits
	released  opts
	lostEnd   opts
	lostCause [len(causes)]opts
	renewOK   opts
	renewFail opts
	opAcquire opts
	opRelease opts
	opRenew   opts
}

func newAttrSets(k attrKey) *attrSets {
	base := []attribute.KeyValue{keyEngine.String(k.engine)}
	if k.name != "" {
		base = append(base, keyName.String(k.name))
	}
	with := func(kv ...attribute.KeyValue) opts {
		return newOpts(append(append([]attribute.KeyValue(nil), base...), kv...)...)
	}
	s := &attrSets{
		engine:    with(),
		released:  with(keyEnd.String("released")),
		lostEnd:   with(keyEnd.String("lost")),
		renewOK:   with(keyResult.String("ok")),
		renewFail: with(keyResult.String("failed")),
		opAcquire: with(keyOperation.String("acquire")),
		opRelease: with(keyOperation.String("release")),
		opRenew:   with(keyOperation.String("renew")),
	}
	for i, o := range outcomes {
		if k.switcher != "" {
			s.result[i] = with(keySwitcher.String(k.switcher), keyResult.String(string(o)))
			sw := []attribute.KeyValue{keySwitcher.String(k.switcher), keyResult.String(string(o))}
			if k.name != "" {
				sw = append(sw, keyName.String(k.name))
			}
			s.swResult[i] = newOpts(sw...)
		} else {
			s.result[i] = with(keyResult.String(string(o)))
		}
	}
	for i, c := range causes {
		s.lostCause[i] = with(keyCause.String(string(c)))
	}
	return s
}

// sets returns the attribute sets of engine (through switcher, when not
// empty) for lock name, made on first use.
func (t *Telemetry) sets(engine, switcher, lockName string) *attrSets {
	k := attrKey{engine: engine, switcher: switcher}
	if t.nameLabel != nil && lockName != "" {
		k.name = t.nameLabel(lockName)
	}
	if s, ok := (*t.attrs.Load())[k]; ok {
		return s
	}
	t.attrMu.Lock()
	defer t.attrMu.Unlock()
	old := *t.attrs.Load()
	if s, ok := old[k]; ok {
		return s
	}
	s := newAttrSets(k)
	m := maps.Clone(old)
	m[k] = s
	t.attrs.Store(&m)
	return s
}

// counting marks s as having holds or waiters to observe, and returns it.
func (s *attrSets) counting() *attrSets {
	if !s.counted.Load() {
		s.counted.Store(true)
	}
	return s
}
