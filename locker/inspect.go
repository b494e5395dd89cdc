package locker

import (
	"context"
	"time"
)

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

// Inspector is implemented by engines that tell operators who holds and
// who waits for a name, and that can end a hold by force (lockctl holders,
// lockctl unlock --force).
type Inspector interface {
	// Inspect reports the hold and waiters of name.
	Inspect(ctx context.Context, name string) (Inspection, error)
	// ForceUnlock ends the current hold of name whoever owns it and
	// returns it; its owner's Lost closes when the engine tells it (at
	// once, or at its next renewal). ErrNotHeld when the name is free.
	ForceUnlock(ctx context.Context, name string) (Holder, error)
}
