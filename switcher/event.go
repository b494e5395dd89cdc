package switcher

import (
	"context"
	"time"
)

// Reason says why the switcher changed engines.
type Reason string

// The reasons of a switch.
const (
	ReasonBreaker  Reason = "breaker"  // the current engine's breaker opened
	ReasonManual   Reason = "manual"   // SwitchEngine or SwitchEngineTo
	ReasonSource   Reason = "source"   // a watched configuration key named another engine
	ReasonFailback Reason = "failback" // the primary was healthy for the failback period
	// ReasonDeferred is not a switch: the source names an engine (To) that
	// this process cannot use yet (its breaker is open or its health check
	// fails), so it stays on From and follows once To is healthy.
	ReasonDeferred Reason = "deferred"
)

// Event is one switch of the current engine, or a deferred one
// (ReasonDeferred).
type Event struct {
	From, To string
	Reason   Reason
	At       time.Time
	// Epoch is the switch epoch after the switch; it is the high part of
	// every fencing token granted until the next switch.
	Epoch uint64
}

// Desired is what a Source asks for: the engine new acquisitions go to.
type Desired struct {
	Engine string
	// Epoch orders the values of a shared source (an etcd key's or
	// ZooKeeper node's version), so that every process applying the same
	// value reaches the same switch epoch. 0 when the source has none.
	Epoch uint64
}

// Source yields the desired engine: a watched configuration key.
type Source interface {
	// Watch calls apply with the current value, then with every change,
	// until ctx is done. It returns nil when ctx is done, or an error when
	// it cannot watch at all. A value it cannot read is logged and skipped.
	Watch(ctx context.Context, apply func(Desired)) error
}

// Proposer is implemented by sources shared by a fleet (an etcd key, a
// ZooKeeper node). A switcher whose breaker opens proposes the switch
// through it, so that every process follows one decision and shares its
// epoch, instead of each switching on its own breaker.
type Proposer interface {
	// Propose sets the source to engine if it still holds the value of
	// epoch from (compare-and-swap), and returns the value in force
	// afterwards and whether it is this proposal's: the proposal with its
	// new epoch if it won, the value another writer put there if it lost.
	// An error means the source did not answer.
	// A key or node that does not exist is the value of epoch 0: the
	// first proposal, from 0, creates it (compare-and-swap on absence).
	Propose(ctx context.Context, from uint64, engine string) (d Desired, won bool, err error)
	// Read returns the value in force; ok is false when the key or node
	// does not exist (or names no engine). A switcher reads it before its
	// first grant, so that a process started after switches grants on the
	// fleet's engine at the fleet's epoch. An error means the source did
	// not answer.
	Read(ctx context.Context) (d Desired, ok bool, err error)
}

// Setter is implemented by sources that can be written, so that one call
// flips every switcher watching the same key.
type Setter interface {
	Set(ctx context.Context, engine string) error
}

// Member is what one switcher reports of itself through a shared source, so
// that operators see what every process of a fleet does.
type Member struct {
	ID      string    `json:"id"`      // host:pid:switcher-name, unique per switcher
	Engine  string    `json:"engine"`  // the engine its new acquisitions go to
	Epoch   uint64    `json:"epoch"`   // its switch epoch
	Desired string    `json:"desired"` // the engine the source names, as it last read it ("" before the first read)
	Since   time.Time `json:"since"`   // when it last changed engine, or started
	// Down names the engines whose breaker is not closed here: this
	// process's vote that the fleet leave them. A breaker switch of the
	// fleet needs a quorum of such votes (WithQuorum).
	Down []string `json:"down,omitempty"`
}

// Announcer is implemented by shared sources: a switcher publishes its
// Member there after every change and every few seconds, on a lease or an
// ephemeral node that ends with the process, and retracts it on Close.
type Announcer interface {
	Announce(ctx context.Context, m Member) error
	Retract(ctx context.Context, id string) error
}

// Roster is implemented by shared sources: it lists the Members that the
// switchers of a fleet announced and that are still alive.
type Roster interface {
	Members(ctx context.Context) ([]Member, error)
}
