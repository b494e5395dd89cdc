package locker

// RWHandle is one owner's handle on one named read-write lock: many
// readers or one writer. It is the write side itself (Lock, Unlock, Token,
// Lost of the write hold), and RLocker returns the read side of the same
// owner, as sync.RWMutex.RLocker does, so that either side can go wherever
// a Handle goes (a MultiLock part, the switcher's pinning).
//
// Both sides re-enter and count per owner. A writer may take the read side
// (downgrade: write, read, release write keeps the read hold); taking the
// write side while holding only the read side fails at once with an error
// wrapping ErrUpgrade, never a deadlock. Every hold, read or write, has a
// fencing token from one sequence per name, so a writer's token exceeds
// every earlier reader's.
//
// Engines that offer read-write locks implement RWEngine. Fairness is the
// engine's: ZooKeeper and etcd queue readers and writers in one order
// (sequence, revision), so a reader behind a waiting writer waits and
// writers never starve; Redis prefers writers.
type RWHandle interface {
	Handle
	// RLocker returns the read side of this owner: its Lock is a read
	// lock, its Unlock releases one read hold.
	RLocker() Handle
}

// RWEngine is implemented by engines (and the switcher) that offer
// read-write locks.
type RWEngine interface {
	Engine
	// NewRWLocker returns a new owner's handle on the named read-write
	// lock. The name space is the engine's mutex name space: a name used
	// for a mutex must not be used for a read-write lock.
	NewRWLocker(name string, opts ...Option) (RWHandle, error)
}
