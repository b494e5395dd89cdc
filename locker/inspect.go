package locker

import "time"

// Holder is one hold or queued waiter of a lock, as an engine reports it to
// operators (lockctl holders).
type Holder struct {
	Owner string
	Token uint64
	// TTL is the time the hold has left; 0 when the engine keeps no
	// per-hold TTL (ZooKeeper: the owner's session keeps it).
	TTL time.Duration
}

// Inspection is what an engine knows of one lock name.
type Inspection struct {
	// Holder is the current hold; nil when the name is free.
	Holder *Holder
	// Waiters are the queued waiters, first in line first, on engines that
	// queue them (ZooKeeper, etcd).
	Waiters []Holder
	// Subscribers counts the processes waiting for a release on engines
	// that do not queue waiters (Redis: subscribers of the name's channel).
	Subscribers int
}
