// Package locker is the contract of orthrus: one Locker interface over
// several distributed lock engines (Redis, ZooKeeper, etcd) and the
// switcher that fails over between them.
//
// # Owners and re-entry
//
// A Locker value is one owner of one named lock, with a unique owner ID
// (host:pid:random, or WithOwner). Calls on the same Locker re-enter and
// count, from any goroutine: each Lock, TryLock, TryLockTimeout or LockCtx
// that succeeds is matched by one Unlock, and the lock is freed at zero.
// Re-entry is counted in the process and costs no round trip. Two Lockers
// exclude each other, even in one process.
//
// # Leases
//
// A hold never outlives its owner. By default it lives 30s (driver.DefaultTTL) and
// a watchdog renews it every TTL/3 while it is held (WithTTL changes the
// TTL). WithLease gives a fixed lease with no renewal. Each engine's
// driver.Core renews its holds in chunks of at most 128 that fall due together,
// four chunks in flight at a time, so that the cost of one renewal call
// does not grow with the number of holds and a slow call holds up only its
// own chunk; each call is bounded by its chunk's earliest deadline and by a
// third of a TTL. When renewal falls behind anyway (a chunk taken more than
// half an interval late), a WARN says by how much, before holds are lost;
// lost holds are reported by Lost, and in one WARN per chunk. A renewal
// that fails is tried again after an eighth of an interval, doubling up to
// half an interval: about seven tries per TTL against a server that stays
// down. ZooKeeper ties liveness to its session instead; see its package.
// An engine that cannot keep a TTL below some minimum says so with
// driver.MinTTLer (each engine of this module documents its MinTTL; a switcher
// has the largest of its engines'), and refuses a shorter WithTTL or
// WithLease with an error naming the option (driver.ResolveFor).
//
// # Releases
//
// Unlock never holds its caller on an engine that does not answer: it
// waits for the answer at most 1s (driver.DefaultReleaseWait), then returns an
// error wrapping ErrUnavailable while the release goes on in the
// background, asked again until the release timeout (WithReleaseTimeout,
// 5s), on a goroutine the engine owns and Close stops. A hold whose
// release never gets through ends by its TTL, and a WARN says so. Release
// waits as long as a context allows instead (a Grant's ReleaseWithin is the path
// wrappers use, with a wait and a done channel); the switcher's
// Unlock waits no longer than the engine's breaker stays closed. On
// engines whose client honours a deadline (DeadlineHonourer: etcd,
// ZooKeeper, mem) Unlock releases on its caller's goroutine; on the others
// (Redis, whose pipelines outlast a caller's deadline) a worker makes the
// request, which costs two goroutine switches per Unlock.
//
// # Lost holds
//
// When renewal fails past the TTL, a fixed lease runs out, the session
// expires or the key vanishes, the hold is lost: Lease.Lost closes, renewal
// stops, re-entry fails and every pending Unlock returns ErrLockLost. A
// critical section that must not run without the lock selects on Lost, and
// any resource it writes checks the fencing token.
//
// # Fencing
//
// Every hold carries a token (Lease.Token) that increases with each grant of
// that name on that engine. Pass it to the resource you protect and have the
// resource refuse a token lower than the highest it has seen: that stops a
// holder paused past its lease from writing after the next holder. Tokens
// from different engines are not comparable; the switcher documents how it
// orders them.
//
// # Lock delay
//
// WithLockDelay(d) bars a name for d after a hold of it ends without
// Unlock: its TTL or fixed lease ran out (its owner died, froze or was cut
// off), its ZooKeeper session expired, or, on ZooKeeper only, an operator
// deleted its node. A waiter waits the bar out; TryLock returns false
// during it. Unlock frees the name at once. The holder still loses the
// hold at its TTL, so a holder that is alive but cut off has d to notice
// Lost and stop before anyone else may start. Default 0: no bar.
//
// The rule is written once: driver.Core gives each hold a Delay, and engines
// whose holds expire on the server keep them there for Hold.Life (TTL +
// delay: Redis PX, etcd's lease TTL, mem's expiry), renewing to Life each
// TTL/3, while the Core loses them at their TTL; a release deletes them at
// once. ZooKeeper, whose holds are ephemeral nodes, keeps a marker node
// instead (see its package). A force unlock (lockctl, inspect.Inspector) bars the
// name on ZooKeeper, where the marker stays, but not on Redis, etcd or
// mem: their servers do not know the delay of the hold they delete. Only a
// mutex takes a delay: NewRWLock and NewSemaphore refuse it.
//
// A delay makes it unlikely that a stale holder's writes land after the
// next holder's (Chubby's lock-delay; Consul's, 15s by default); fencing
// makes it impossible, for resources that check the token.
//
// # Errors
//
// Errors wrap the sentinels of this package and are matched with errors.Is:
// ErrNotHeld, ErrLockLost, ErrUnavailable (the engine failed: what a
// circuit breaker counts), ErrClosed, ErrInvalidName, ErrInvalidArgument,
// ErrPermission, ErrUpgrade, ErrPermitsMismatch.
// Contention is not an error: TryLock and TryLockTimeout return false. A
// cancelled LockCtx returns ctx.Err() itself and leaves nothing behind.
//
// A wait whose context ends while the engine has a request unanswered is
// an outage (ErrUnavailable, what a breaker counts) only when that request
// had gone unanswered for 300ms (driver.OutageAfter); otherwise the caller merely
// ran out of time, as when the name was held, and TryLockTimeout returns
// (false, nil). So a short wait on a slow engine, or on a loaded machine,
// is not an outage, and neither is a short wait on a frozen one: that
// shows only in waits longer than driver.OutageAfter, and in health checks.
//
// # Weights
//
// WithWeight(w), 1 to 10, ranks an owner's waits: among the waiters of a
// name the heaviest is granted first, FIFO within a weight (the default, 1
// everywhere, is plain FIFO). A weight never takes a hold from its holder,
// and TryLock, which never waits, is unaffected. Nothing ages a waiter, so
// a steady stream of heavier waiters starves lighter ones. The in-memory,
// PostgreSQL, etcd and ZooKeeper engines rank waiters, and Redis with
// redis.WithFair; etcd and ZooKeeper semaphores, Redis without WithFair
// and Redlock refuse a weight above 1 at each acquisition, with an error
// wrapping errors.ErrUnsupported that says why (driver.Weigher).
//
// # Multi-lock
//
// NewMultiLock holds several locks as one: all of them or none. Its parts
// are Handles of any engines or switchers, mixed. It acquires them in one
// global order, by lock name, so two owners of overlapping sets never wait
// for each other in a cycle; the engine is not part of the order, because
// a Handle names its engine only once granted (a switcher's part is granted
// by whichever engine is current then), and two parts with one name are
// refused. One wait budget covers all parts (LockCtx's context,
// TryLockTimeout's wait; TryLock makes one attempt per part). When a part
// fails, is contended or the budget ends, the parts already taken are
// released, each on its own bounded context, before the call returns.
//
// A MultiLock re-enters and counts like a mutex; the last Unlock releases
// every part and joins their errors. Lost closes when any part is lost.
// Token is the largest of the parts' tokens: it increases with every grant
// of the same set, so it fences a resource guarded by exactly that set; a
// resource guarded by one name is fenced with that part's token (Parts).
// Engine lists the granting engines. Not guaranteed: atomicity on the
// servers (the parts are granted one by one, so an observer may see some
// held before the others), nor fairness between a multi-lock and single
// owners of its names. Package lockertest's RunMulti checks the semantics.
//
// # Read-write locks
//
// Engine.NewRWLock returns one owner's read-write lock: ReadLock and
// WriteLock are Handles of the same owner. Many owners hold the read side at
// once, or one owner the write side; each side re-enters and counts. An
// owner holding the write side may take the read side at once (a
// downgrade): the read hold gets the writer's token, and a writer that
// queued meanwhile waits for it, so that releasing the write side then
// keeps the owner reading with nobody writing. Taking the write side while
// holding only the read side fails at once with ErrUpgrade: two readers
// doing it would wait for each other forever. Each hold, read or write, is
// its own lease with a fencing token, Lost and renewal as a mutex hold has;
// readers and writers of a name share one token sequence, so a writer's
// token is above every earlier reader's. Waiting is fair on ZooKeeper, etcd
// and engines/mem (one queue: a reader behind a waiting writer waits) and
// writer-preferring on Redis; writers never starve on any engine. The
// mutex, the read-write lock and the semaphore of one name are three
// independent locks.
//
// # Semaphores
//
// Engine.NewSemaphore(name, n) opens a semaphore of n permits. Acquire(ctx,
// k) takes k permits at once, all or none, as one hold: a Handle whose
// Unlock returns them, whose Lost closes when they expire under their
// holder (its TTL and renewal, or the ZooKeeper session), and whose Token
// fences like a lock's. NewPermit gives that Handle before acquiring, so a
// permit takes part in everything a Locker does (TryLockTimeout, a
// MultiLock, the switcher). The count is stored with the semaphore on the
// server: the first acquisition of a Semaphore opened with another count
// fails with ErrPermitsMismatch; acquisitions after it honour the stored
// count, which an operator changes with inspect.FamilyInspector.SetPermits
// (lockctl permits). Waiting is FIFO on ZooKeeper, etcd and engines/mem.
// Package lockertest's RunRW and RunSemaphore check the semantics.
//
// # Packages
//
// This package is what users of the engines call. Beside it:
//
//   - package driver is the engine author's API: Core (owners, re-entry,
//     renewal, lost holds, releases) over a Backend of Hold primitives,
//     Resolve and ValidateName for wrappers, the defaults (DefaultTTL,
//     DefaultReleaseWait, ...) and OutageAfter;
//   - package inspect is what operators read and force: Inspector,
//     FamilyInspector and the Kind of a hold;
//   - package observe is what an Observer of the engines sees
//     (acquisitions, outcomes, lost causes); package telemetry implements
//     one;
//   - package lockertest is the conformance suite every engine passes,
//     and package faults a fault-injecting wrapper for tests.
//
// Grant, NewHandle, Take and GrantOf are here, not in driver, because
// MultiLock is built on them, as is anything else that wraps a Handle
// (the switcher, faults, driver.Core's own Handles).
package locker
