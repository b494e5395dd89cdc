package drill

import (
	"fmt"
	"slices"
	"sort"
	"time"
)

// Fleet is what a drill of several processes measured across them.
type Fleet struct {
	// Processes are each process's own report, without its grants, in
	// order.
	Processes []*Report `json:"processes"`
	// Switches has one entry per fault or planned switch: how the fleet
	// followed it.
	Switches []FleetSwitch `json:"switches"`
	// Split is the time the processes were not all on one engine, and
	// LongestSplit its longest stretch.
	Split        time.Duration `json:"split"`
	LongestSplit time.Duration `json:"longest_split"`
	// Fencing is, per process, what a fenced resource shared by the fleet
	// (one that refuses a token lower than the highest it accepted for the
	// name) made of its writes, one write per grant.
	Fencing []Fencing `json:"fencing"`
}

// FleetSwitch is how the fleet followed one fault or planned switch.
type FleetSwitch struct {
	Fault Mark `json:"fault"`
	// Switched counts the processes that switched after the fault (before
	// the next one); First and Last are the first and last of them, as
	// offsets of the drill, and Spread is Last - First.
	Switched int           `json:"switched"`
	First    time.Duration `json:"first"`
	Last     time.Duration `json:"last"`
	Spread   time.Duration `json:"spread"`
}

// Fencing is what a fenced resource made of one process's writes.
type Fencing struct {
	Process string `json:"process"`
	Writes  int64  `json:"writes"`
	Refused int64  `json:"refused"`
	// FencedOut is the longest stretch from a refused write to the
	// process's next accepted one (or the end of the drill), and
	// FencedOutTotal their sum.
	FencedOut      time.Duration `json:"fenced_out"`
	FencedOutTotal time.Duration `json:"fenced_out_total"`
}

// Merge combines the reports of the processes of one fleet drill, which
// shared their start (Config.Start) and kept their grants
// (Config.KeepGrants), with the faults injected from outside them, into one
// report whose Fleet says how the fleet moved. The reports' grants are
// dropped.
func Merge(processes []*Report, faults []Mark) *Report {
	r := &Report{Acquired: make(map[string]int64), SwitchLatency: -1, Fleet: &Fleet{}}
	if len(processes) == 0 {
		return r
	}
	first := processes[0]
	r.Started, r.Engines, r.Names, r.Tick, r.Initial = first.Started, first.Engines, first.Names, first.Tick, first.Initial
	for _, p := range processes {
		r.add(p)
	}
	grants := fleetGrants(processes)
	r.Timeline = mergeTimeline(processes, grants, r.Tick)
	r.addFleetSwitches(processes, faults)
	r.Fleet.Split, r.Fleet.LongestSplit = split(processes, r.Duration)
	r.Fleet.Fencing = fence(processes, grants, r.Duration)
	return r
}

// add adds a process's totals, violations and errors to the fleet's, and
// its report, without its grants, to the fleet's lanes.
func (r *Report) add(p *Report) {
	r.Duration = max(r.Duration, p.Duration)
	r.Workers += p.Workers
	for e, n := range p.Acquired {
		r.Acquired[e] += n
	}
	r.Failed += p.Failed
	r.Retried += p.Retried
	r.Lost += p.Lost
	r.UnlockErrors += p.UnlockErrors
	for _, v := range p.Violations {
		r.Violations = append(r.Violations, p.Process+": "+v)
	}
	for _, e := range p.Errors {
		if len(r.Errors) < maxListed {
			r.Errors = append(r.Errors, p.Process+": "+e)
		}
	}
	lane := *p
	lane.Grants = nil
	r.Fleet.Processes = append(r.Fleet.Processes, &lane)
}

// fleetGrant is a grant with the index of the process it went to.
type fleetGrant struct {
	Grant
	p int
}

// fleetGrants returns every process's grants in time order.
func fleetGrants(processes []*Report) []fleetGrant {
	var grants []fleetGrant
	for i, p := range processes {
		for _, g := range p.Grants {
			grants = append(grants, fleetGrant{g, i})
		}
	}
	sort.SliceStable(grants, func(i, j int) bool { return grants[i].At < grants[j].At })
	return grants
}

// mergeTimeline returns the fleet's timeline: sums per tick, latencies of
// all the tick's grants.
func mergeTimeline(processes []*Report, grants []fleetGrant, tick time.Duration) []Bucket {
	n := 0
	for _, p := range processes {
		n = max(n, len(p.Timeline))
	}
	waits := make([][]time.Duration, n)
	for _, g := range grants {
		if k := int(g.At / tick); k >= 0 && k < n {
			waits[k] = append(waits[k], g.Wait)
		}
	}
	var timeline []Bucket
	for k := range n {
		b := Bucket{At: time.Duration(k) * tick, Acquired: make(map[string]int64)}
		for _, p := range processes {
			if k < len(p.Timeline) {
				for e, c := range p.Timeline[k].Acquired {
					b.Acquired[e] += c
				}
				b.Failed += p.Timeline[k].Failed
			}
		}
		b.P50, b.P99 = percentiles(waits[k])
		timeline = append(timeline, b)
	}
	return timeline
}

// addFleetSwitches marks the faults and, after each, the fleet's first
// switch, and takes the switch latency from the first fault followed.
func (r *Report) addFleetSwitches(processes []*Report, faults []Mark) {
	r.Marks = append(r.Marks, faults...)
	r.Fleet.Switches = followed(processes, faults)
	for _, s := range r.Fleet.Switches {
		if s.Switched == 0 {
			continue
		}
		r.Marks = append(r.Marks, Mark{At: s.First, Kind: KindSwitch, Label: fleetSwitchLabel(processes, s),
			Detail: fmt.Sprintf("%d of %d processes within %v", s.Switched, len(processes), Round(s.Spread))})
		if r.SwitchLatency < 0 {
			r.SwitchLatency = s.First - s.Fault.At
		}
	}
	sort.SliceStable(r.Marks, func(i, j int) bool { return r.Marks[i].At < r.Marks[j].At })
}

// fence replays the grants, in time order, as writes to a fenced resource
// shared by the fleet, and returns what it made of each process's writes
// in a drill of the given duration.
func fence(processes []*Report, grants []fleetGrant, duration time.Duration) []Fencing {
	fencing := make([]Fencing, len(processes))
	since := make([]time.Duration, len(processes)) // refused since; -1: not refused
	for i, p := range processes {
		fencing[i].Process = p.Process
		since[i] = -1
	}
	highest := make(map[string]uint64)
	for _, g := range grants {
		f := &fencing[g.p]
		f.Writes++
		if g.Token < highest[g.Name] {
			f.Refused++
			if since[g.p] < 0 {
				since[g.p] = g.At
			}
			continue
		}
		highest[g.Name] = g.Token
		if since[g.p] >= 0 {
			f.FencedOut = max(f.FencedOut, g.At-since[g.p])
			f.FencedOutTotal += g.At - since[g.p]
			since[g.p] = -1
		}
	}
	for i := range fencing {
		if since[i] >= 0 {
			fencing[i].FencedOut = max(fencing[i].FencedOut, duration-since[i])
			fencing[i].FencedOutTotal += duration - since[i]
		}
	}
	return fencing
}

// followed finds, for each fault, the first switch of every process after
// it and before the next fault.
func followed(processes []*Report, faults []Mark) []FleetSwitch {
	var out []FleetSwitch
	for i, f := range faults {
		end := time.Duration(1<<63 - 1)
		if i+1 < len(faults) {
			end = faults[i+1].At
		}
		s := FleetSwitch{Fault: f}
		for _, p := range processes {
			k := slices.IndexFunc(p.Marks, func(m Mark) bool { return m.Kind == KindSwitch && m.At >= f.At && m.At < end })
			if k < 0 {
				continue
			}
			at := p.Marks[k].At
			if s.Switched == 0 || at < s.First {
				s.First = at
			}
			s.Last = max(s.Last, at)
			s.Switched++
		}
		s.Spread = s.Last - s.First
		out = append(out, s)
	}
	return out
}

// fleetSwitchLabel is the label of the first process's switch after a
// fault.
func fleetSwitchLabel(processes []*Report, s FleetSwitch) string {
	for _, p := range processes {
		for _, m := range p.Marks {
			if m.Kind == KindSwitch && m.At == s.First {
				return m.Label
			}
		}
	}
	return "switch"
}

// split returns how long the processes were not all on one engine, in
// total and at most at once, between 0 and end.
func split(processes []*Report, end time.Duration) (total, longest time.Duration) {
	type change struct {
		at time.Duration
		p  int
		to string
	}
	var changes []change
	current := make([]string, len(processes))
	for i, p := range processes {
		current[i] = p.Initial
		for _, m := range p.Marks {
			if m.Kind == KindSwitch {
				changes = append(changes, change{m.At, i, m.To})
			}
		}
	}
	sort.SliceStable(changes, func(i, j int) bool { return changes[i].at < changes[j].at })
	apart := func() bool {
		for _, c := range current {
			if c != current[0] {
				return true
			}
		}
		return false
	}
	var from time.Duration = -1 // start of the current split
	at := time.Duration(0)
	for _, c := range changes {
		at = min(c.at, end)
		current[c.p] = c.to
		switch a := apart(); {
		case a && from < 0:
			from = at
		case !a && from >= 0:
			total += at - from
			longest = max(longest, at-from)
			from = -1
		}
	}
	if from >= 0 {
		total += end - from
		longest = max(longest, end-from)
	}
	return total, longest
}
