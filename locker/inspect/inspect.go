package inspect

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

// FamilyInspection is what an engine knows of one read-write lock or
// semaphore name.
type FamilyInspection struct {
	// Holders are the current holds, oldest grant first: for a read-write
	// lock, the writer or the readers (a downgrading owner shows twice);
	// for a semaphore, the permit holds.
	Holders []FamilyHolder
	// Waiters are the waiters, first in line first: readers, writers and
	// permit waiters alike.
	Waiters []FamilyHolder
	// Permits is a semaphore's stored permit count; 0 for a read-write lock
	// and for a semaphore never acquired.
	Permits int
}

// FamilyHolder is one hold or waiter of a read-write lock or semaphore.
type FamilyHolder struct {
	Holder
	Kind    Kind // KindRead, KindWrite or KindPermit
	Permits int  // permits held or wanted; 1 for lock sides
}

// FamilyInspector is implemented by engines that tell operators about the
// read-write locks and semaphores they hold (lockctl holders --kind), and
// that let an operator change a semaphore's count.
type FamilyInspector interface {
	// InspectFamily reports the holds and waiters of the read-write lock
	// (KindRead or KindWrite) or the semaphore (KindPermit) named name.
	InspectFamily(ctx context.Context, kind Kind, name string) (FamilyInspection, error)
	// SetPermits stores n as the permit count of semaphore name: later
	// acquisitions honour it; holds already granted stay.
	SetPermits(ctx context.Context, name string, n int) error
	// ForceUnlockFamily ends, whoever owns them, the holds of the
	// read-write lock (KindRead or KindWrite: both sides) or semaphore
	// (KindPermit) named name whose token is token, or every hold when
	// token is 0, and returns what it ended. Waiters stay queued and get
	// their turn; the owners' Lost close when the engine tells them (at
	// once, or at their next renewal). ErrNotHeld when nothing matched.
	ForceUnlockFamily(ctx context.Context, kind Kind, name string, token uint64) ([]FamilyHolder, error)
}
