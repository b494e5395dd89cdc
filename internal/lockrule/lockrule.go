// Package lockrule states, once, the order in which the lock family grants
// holds: who, in a name's queue, is granted, and whom each waiter waits for.
// It is pure (no I/O, no clock). The in-memory engine and ZooKeeper apply it
// to their queues, etcd to the ranges it reads, and the model test in
// lockertest checks every engine (Redis keeps the same rule in Lua) against
// it as the oracle.
//
// Entries already granted stay granted. The waiting entries are ranked by
// weight, heaviest first, and by their place in the queue within a weight;
// a waiting entry is granted when it is compatible with every granted
// entry and with every waiting entry ranked ahead of it:
//   - a mutex or a writer with no other entry at all (a downgraded reader
//     anywhere counts: it is granted);
//   - a reader with no mutex or writer (a reader behind a waiting writer
//     ranked ahead waits);
//   - a downgraded reader (a read taken by the write holder) is granted at
//     once, wherever it stands;
//   - a semaphore request when its permits and those of the entries ahead
//     fit the stored count.
//
// With every weight 1 this is strict FIFO per name, so that writers and
// large permit requests never starve. Weights trade that away: a steady
// stream of heavier waiters starves lighter ones (nothing ages a waiter's
// weight), and a heavier waiter never takes a grant from a holder.
package lockrule

import "github.com/orthrus-go/orthrus/locker/inspect"

// Entry is one hold or waiter of a name's queue; a queue is oldest first.
type Entry struct {
	Kind inspect.Kind
	// Permits is what a KindPermit entry takes.
	Permits int
	// Downgrade marks a KindRead entry taken by the owner of the write hold.
	Downgrade bool
	// Weight ranks a waiting entry: heavier first (1 to 10; 0 means 1).
	Weight int
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

// Exclusive reports whether an entry of kind k excludes every other.
func Exclusive(k inspect.Kind) bool { return k == inspect.KindMutex || k == inspect.KindWrite }

func (e Entry) weight() int { return max(e.Weight, 1) }

// Decide applies the rule to q[own] with no grant recorded but the
// downgrades': for a queue whose weights are all 1, the grants follow from
// the queue. count is the semaphore's stored permit count (ignored for
// other kinds).
func Decide(q []Entry, own, count int) Verdict { return DecideHeld(q, nil, own, count) }

// DecideHeld applies the rule to q[own], with held marking the entries
// granted already (nil: none but the downgrades). An entry held stays
// granted.
func DecideHeld(q []Entry, held []bool, own, count int) Verdict {
	r := ranking{q: q, held: held, own: own}
	e := q[own]
	switch {
	case e.Downgrade || r.granted(own):
		return Verdict{Granted: true}
	case e.Kind == inspect.KindPermit:
		return r.permit(count)
	}
	return r.verdict(e.Kind == inspect.KindRead)
}

// Granted is DecideHeld(q, held, own, count).Granted, for an engine that
// needs no blockers: it stops at the first conflict and allocates nothing.
func Granted(q []Entry, held []bool, own, count int) bool {
	r := ranking{q: q, held: held, own: own}
	e := q[own]
	switch {
	case e.Downgrade || r.granted(own):
		return true
	case e.Kind == inspect.KindPermit:
		return Fits(r.sumAhead(), e.Permits, count)
	}
	reader := e.Kind == inspect.KindRead
	for i := range q {
		if r.conflicts(i, reader) {
			return false
		}
	}
	return true
}

// ranking is the view of one waiting entry, own, on its queue.
type ranking struct {
	q    []Entry
	held []bool
	own  int
}

func (r ranking) granted(i int) bool {
	return r.q[i].Downgrade || (r.held != nil && r.held[i])
}

// before reports whether q[i] ranks before q[j]: heavier, or as heavy and
// earlier in the queue.
func (r ranking) before(i, j int) bool {
	wi, wj := r.q[i].weight(), r.q[j].weight()
	return wi > wj || (wi == wj && i < j)
}

// ahead reports whether q[i] counts against own: granted, or ranked ahead.
func (r ranking) ahead(i int) bool {
	return i != r.own && (r.granted(i) || r.before(i, r.own))
}

// conflicts reports whether q[i] is ahead of own and excludes it: any
// entry excludes a mutex, a writer or a semaphore request that does not
// fit, only a mutex or a writer excludes a reader.
func (r ranking) conflicts(i int, reader bool) bool {
	return (!reader || Exclusive(r.q[i].Kind)) && r.ahead(i)
}

// sumAhead is the permits of the entries ahead of own.
func (r ranking) sumAhead() int {
	sum := 0
	for i := range r.q {
		if r.ahead(i) {
			sum += r.q[i].Permits
		}
	}
	return sum
}

// verdict grants own unless an entry ahead of it conflicts (with a
// reader, only a mutex or a writer does); it waits for the conflicting
// entry ranked last before it (its predecessor, as in a ZooKeeper queue),
// or, when all rank after it (holders), the first of them.
func (r ranking) verdict(reader bool) Verdict {
	last, first := -1, -1
	for i := range r.q {
		if !r.conflicts(i, reader) {
			continue
		}
		switch {
		case r.before(i, r.own):
			if last < 0 || r.before(last, i) {
				last = i
			}
		case first < 0 || r.before(i, first):
			first = i
		}
	}
	switch {
	case last >= 0:
		return Verdict{Blockers: []int{last}}
	case first >= 0:
		return Verdict{Blockers: []int{first}}
	}
	return Verdict{Granted: true}
}

// permit: the first request that does not fit, the head, waits for every
// entry ahead of it and for the count; the others wait for their
// predecessor, which tells them when it is granted. Permits are never
// negative, so the entries ahead already overflow the count exactly when
// the head is one of them.
func (r ranking) permit(count int) Verdict {
	sum := r.sumAhead()
	if Fits(sum, r.q[r.own].Permits, count) {
		return Verdict{Granted: true}
	}
	if !Fits(sum, 0, count) {
		return r.verdict(false)
	}
	v := Verdict{Count: true}
	for i := range r.q {
		if r.ahead(i) {
			v.Blockers = append(v.Blockers, i)
		}
	}
	return v
}

// Fits reports whether permits more fit a count of which before are taken
// or asked for first.
func Fits(before, permits, count int) bool { return before+permits <= count }

// Grants returns which entries of q the rule grants, with held marking the
// entries granted already: a grant is never taken back by the rule (a
// lowered permit count keeps its holders). An entry granted here needs no
// second pass: it was ranked ahead of those it now holds against.
func Grants(q []Entry, held []bool, count int) []bool {
	out := make([]bool, len(q))
	for i := range q {
		out[i] = Granted(q, held, i, count)
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
