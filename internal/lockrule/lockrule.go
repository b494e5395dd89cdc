// Package lockrule states, once, the order in which the lock family grants
// holds: who, in a name's queue, is granted, and whom each waiter waits for.
// It is pure (no I/O, no clock). The in-memory engine and ZooKeeper apply it
// to their queues, etcd to the ranges it reads, and the model test in
// lockertest checks every engine (Redis keeps the same rule in Lua) against
// it as the oracle.
//
// The rule is strict FIFO per name, so that writers and large permit
// requests never starve:
//   - a mutex or a writer is granted when no entry is before it and no
//     downgraded reader exists anywhere in the queue;
//   - a reader is granted when no writer is before it (a reader behind a
//     waiting writer waits);
//   - a downgraded reader (a read taken by the write holder) is granted at
//     once, wherever it stands;
//   - a semaphore request is granted when its permits and those of every
//     entry before it fit the stored count.
package lockrule

import "github.com/orthrus-go/orthrus/locker/inspect"

// Entry is one hold or waiter of a name's queue; a queue is oldest first.
type Entry struct {
	Kind inspect.Kind
	// Permits is what a KindPermit entry takes.
	Permits int
	// Downgrade marks a KindRead entry taken by the owner of the write hold.
	Downgrade bool
}

// Verdict is the decision on one entry of a queue.
type Verdict struct {
	Granted bool
	// Blockers are the indexes of the entries whose going (or, for a
	// semaphore's waiter, whose grant) may grant this one.
	Blockers []int
	// Count: a change of the stored permit count may grant this one.
	Count bool
}

// exclusive reports whether an entry of kind k excludes every other.
func exclusive(k inspect.Kind) bool { return k == inspect.KindMutex || k == inspect.KindWrite }

// Decide applies the rule to q[own]; count is the semaphore's stored
// permit count (ignored for other kinds).
func Decide(q []Entry, own, count int) Verdict {
	e := q[own]
	switch {
	case e.Downgrade:
		return Verdict{Granted: true}
	case e.Kind == inspect.KindPermit:
		return decidePermit(q, own, count)
	case e.Kind == inspect.KindRead:
		for i := own - 1; i >= 0; i-- {
			if exclusive(q[i].Kind) {
				return Verdict{Blockers: []int{i}}
			}
		}
		return Verdict{Granted: true}
	}
	if own > 0 {
		return Verdict{Blockers: []int{own - 1}}
	}
	for i := range q {
		if q[i].Downgrade {
			return Verdict{Blockers: []int{i}}
		}
	}
	return Verdict{Granted: true}
}

// decidePermit: the first request that does not fit, the head, waits for
// every entry before it and for the count; the others wait for the entry
// just before them, which tells them when it is granted.
func decidePermit(q []Entry, own, count int) Verdict {
	sum, headBefore := 0, false
	for i := range own {
		sum += q[i].Permits
		headBefore = headBefore || !Fits(sum, 0, count)
	}
	if Fits(sum, q[own].Permits, count) {
		return Verdict{Granted: true}
	}
	if headBefore {
		return Verdict{Blockers: []int{own - 1}}
	}
	v := Verdict{Count: true}
	for i := range own {
		v.Blockers = append(v.Blockers, i)
	}
	return v
}

// Fits reports whether permits more fit a count of which before are taken
// or asked for first.
func Fits(before, permits, count int) bool { return before+permits <= count }

// Grants returns which entries of q the rule grants, with held marking the
// entries granted already: a grant is never taken back by the rule (a
// lowered permit count keeps its holders), and an entry granted here counts
// as held for those after it.
func Grants(q []Entry, held []bool, count int) []bool {
	out := make([]bool, len(q))
	for i := range q {
		out[i] = held[i] || Decide(q, i, count).Granted
	}
	return out
}

// WaitsFor reports whether an entry of kind k (not KindPermit) waits while
// other stands in the same queue, before it or after it: the rule read
// pair by pair, for an engine that encodes it as what each kind watches
// (etcd). For these kinds the rule is a conjunction over pairs, so the
// pairs tell it whole.
func WaitsFor(k inspect.Kind, other Entry, before bool) bool {
	if before {
		return !Decide([]Entry{other, {Kind: k}}, 1, 0).Granted
	}
	return !Decide([]Entry{{Kind: k}, other}, 0, 0).Granted
}
