// Package etcd is the orthrus lock engine for etcd v3: lease-bound keys
// ordered by create revision, each waiter watching only what blocks it;
// mutexes, fair read-write locks and FIFO semaphores.
//
// # Use
//
//	client, err := clientv3.New(clientv3.Config{Endpoints: endpoints})
//	...
//	defer client.Close()
//	engine, err := etcd.New(client, etcd.WithPrefix("myapp/locks"))
//	...
//	defer engine.Close()
//	l, err := engine.NewLocker("orders/42")
//
// The caller owns the client, with its endpoints, credentials and TLS: the
// engine never closes it. Close the engine first: Engine.Close releases the
// holds still held (their Lost channels close), makes waiting acquisitions
// return ErrClosed, revokes the engine's leases and stops its watches. The
// engine's goroutines are the renewal workers shared by all engines
// (driver.Core), its lease keeper, its deletion watch and those of its etcd
// watcher, and Close
// stops them all. Close is bounded by driver.DefaultReleaseTimeout when etcd does not
// answer.
//
// # Keys
//
// A lock name is escaped ('%' as "%25", '/' as "%2F") into one key segment,
// so that different names never share keys, and the lock's keys live in the
// range "<prefix>/<escaped name>/" (WithPrefix, default "orthrus"). The
// trailing '/' keeps the range of "a" apart from those of "a/b" and "ab".
// Every acquisition creates a key of its own in that range,
// "<lease ID in hex>-<slot>", whose value is the owner ID. A slot is the
// acquisition's until its key is known to be deleted, so two Lockers with the
// same owner ID on the same lease still have two keys; slots are reused
// afterwards (mostly slot 0), because etcd's key index keeps every key name
// ever created until a compaction and each range read walks them all.
//
// # Guarantees
//
//   - Mutual exclusion with etcd's strong consistency: the key with the
//     lowest create revision in the lock's range holds the lock. An
//     uncontended acquisition is one transaction; a release deletes the
//     key, which no other hold can have meanwhile (its slot is the hold's),
//     and reports ErrLockLost unless it had the hold's create revision.
//   - Long queues: a hand-off costs one request whatever the queue's
//     length (1,000 waiters: about the hand-off time of 10): a waiter
//     behind more than 64 keys marks its key when it holds, so that the
//     next one holds when that key goes without reading the range.
//   - FIFO: waiters get the lock in the order their keys were created. A
//     waiter watches only the key just before its own (no herd), and checks
//     its place again when that key goes and once per TTL of its lease,
//     should a watch fail silently. TryLock creates its key only if the
//     range is empty: contention costs one round trip and leaves nothing
//     behind, and TryLock never jumps the queue.
//   - Fencing: the token is the key's create revision. It increases with
//     every grant of a name (and with every write to the cluster), survives
//     leader changes and restarts, and is comparable only between holds
//     granted by the same etcd cluster.
//   - Cancellation: a cancelled or timed-out wait returns at once, even
//     when etcd does not answer, and stops its watch; its key is deleted in
//     the background, as soon as etcd answers within the request timeout
//     (Close waits for that, bounded). Past that, the key is deleted before
//     its lease is renewed again, or expires with it. A create in flight
//     when the caller gives up is not cancelled: it may still reach etcd,
//     after a delete sent at once; its answer is awaited, and the key it
//     made deleted.
//
// # Read-write locks and semaphores
//
// Engine.NewRWLock and Engine.NewSemaphore (locker.Family) use the same
// leases, slots, renewal and cancellation as the mutex, in ranges of their
// own: "<prefix>/%rw/<escaped name>/" and "<prefix>/%sem/<escaped name>/"
// (an escaped name never starts with a bare '%', so these are no mutex's
// range), so the mutex, the read-write lock and the semaphore of one name
// are independent locks. Every hold, read, write or permits, is a key of
// its own on the shared lease of its TTL, lost and renewed as a mutex hold
// is, and its token is the key's create revision: one sequence per cluster,
// so readers and writers of a name share it and a writer's token is above
// every earlier reader's.
//
// Read-write locks are fair: readers ("r/"), writers ("w/") and downgraded
// readers ("d/") queue in one create revision order. A reader holds when no
// writer key is older than its own, so a reader behind a waiting writer
// waits; it watches the newest such writer key for its deletion, and holds
// with no further request when that was the only one it saw. A writer holds
// when no key is older than its own and no downgraded reader exists; it
// watches the key just before it (or a downgraded reader) and checks its
// place once that is deleted. So a released writer wakes the readers queued
// up to the next writer, and nobody else. TryLock creates its key only if
// nothing holds it out: contention costs one round trip and leaves nothing.
// A downgrade (the read side taken while holding the write side) is one
// transaction that creates a "d/<writer's token>/" key only if the writer's
// key still exists; the read is granted at once with the writer's token
// (its key's name keeps it for operators once the writer is gone), and
// every writer waits for "d/" keys whatever its place in line, so a writer
// that queued during the write hold stays out when the write side is
// released.
// Upgrades are refused by driver.Core (ErrUpgrade).
//
// A semaphore's holds and waiters queue in "q/" in create revision order,
// each key's value giving its permits ("<permits> queued|granted
// <owner>"). A key holds when its permits and those of every key before it
// fit the stored count: FIFO, no acquisition gets ahead of a waiter, even
// one that would fit. The count is the key "permits" of the semaphore's
// range, on no lease: it outlives idle periods, the processes and engine
// restarts, and is created with the first acquisition's count (a
// transaction, only if absent). A Semaphore opened with another count fails
// its first acquisition with an error wrapping locker.ErrPermitsMismatch and
// naming both counts (not ErrUnavailable); later acquisitions honour the
// stored count. SetPermits stores a new count (it marks the holds granted
// first when it lowers it, so that waiters still tell them from waiters);
// a count key deleted by hand counts as the opener's until an acquisition
// stores one again. A release wakes only the waiters whose permits may then
// fit: those near the front follow the queue's events and hold with no
// request; those further back wait for the key before theirs to go or be
// marked granted.
// TryAcquire creates its key only if the queue is empty and the count the
// opener's, or, after reading the queue, if nothing changed since: it
// leaves nothing on contention.
//
// On failure the family behaves as the mutex: a cancelled wait deletes its
// key (in the background, through the Core, when etcd does not answer); a
// hold whose lease ends or whose key is deleted is lost (Lost closes,
// Unlock returns ErrLockLost); a downgraded read and its write hold are two
// holds, each lost on its own.
//
// InspectFamily shows holders and waiters (readers, writers and permit
// waiters alike, with owner, kind and permits) oldest first, a downgrading
// owner twice, both with the writer's token as their Handles have it, and
// a semaphore's stored count. ForceUnlockFamily ends the holds with a
// token (a downgrading owner's two at once), or every hold with token 0:
// one read, then one transaction per 128 holds that deletes their keys only
// if each still has the mod revision read, so a hold granted meanwhile,
// even on the same key name, is never ended; a key merely rewritten
// meanwhile (a grant mark) is deleted again, and one released meanwhile is
// not reported. Waiters stay queued and take their turn as at a release;
// the forced-out owners' engines learn of it at once from their deletion
// watches (Lost closes, Unlock returns ErrLockLost).
//
// # Leases and TTLs
//
// Liveness comes from etcd leases, which count whole seconds and have a
// server minimum (by default 1.5 times the election timeout, rounded up: 2s
// with etcd's default settings). A hold's TTL (locker.WithTTL) is rounded up
// to whole seconds, and holds and waiters of the engine with the same
// rounded TTL share a lease, up to WithKeysPerLease keys (default 5000) on
// one: past that, new acquisitions go on a new lease. The number of leases
// follows the number of distinct TTLs and the number of holds divided by
// that bound (100k holds: 20 leases), never one lease per hold; and a lease
// that ends takes only its own share of the holds with it. A TTL or fixed
// lease below MinTTL (1s, the unit of leases) is refused by NewLocker,
// NewRWLock and NewSemaphore with an error naming the option.
//
// One keeper per engine keeps every lease that has keys on it alive, with
// one KeepAliveOnce when a third of its life has gone, on a goroutine of its
// own per lease: however many holds and waiters ride on a lease, it costs
// one keep-alive per third of its TTL (1,000 waiters on a name: one, not
// 1,000), and nothing else the engine does, the checks of the holds'
// keys in particular, can hold a keep-alive up. A lease without keys is not
// kept alive: it expires on the server, and the next acquisition grants a
// new one (or refreshes it first, once a sixth of its life has gone). The
// engine counts a lease's life from the moment it sent its latest
// successful refresh; a lease the keeper could not refresh within that life
// (etcd unreachable) is given up then: every hold on it is lost, Lost
// closes and a WARN says how many, before the server can end it. So a dead
// owner's hold ends at most its TTL, rounded up to whole seconds (or the
// server minimum), after its last refresh.
//
// The engine keeps its holds itself (it is no driver.Renewer: the Core
// schedules nothing per hold). Once per TTL the keeper checks the keys of
// each lease with holds on it with one LeaseTimeToLive request listing the
// keys attached to it, and only the holds whose keys are missing there by
// one transaction comparing create revisions. A check that fails loses
// nothing by itself: a hold lives as long as its lease. A lease a member
// calls gone is confirmed by a keep-alive, which the leader answers, before
// its holds are lost: a stale member (an old leader not yet stepped down)
// can be wrong, and a lease the leader still renews is kept, with a WARN.
//
// A held key deleted by hand (an operator's ForceUnlock, etcdctl del) is
// noticed at once by the engine's deletion watch: one watch on its
// namespace, deletions only, from the engine's first hold on, which loses
// the hold with cause observe.LostGone (a release never counts). It costs
// one event per deletion in the namespace, other processes' releases
// included, and nothing per hold. After a compaction it missed, every held
// key is checked by its create revision; the keeper's check every TTL stays
// as a fallback. A key deleted with its lease is reported as gone too.
//
// A hold is lost, Lost closes and Unlock returns ErrLockLost, when its
// lease ends (revoked, expired, or not refreshed within its life), or when
// its key is deleted. A hold given up on while its lease lives on has its
// key deleted before the lease is refreshed again, so it never keeps the
// lock.
//
// A fixed lease (locker.WithLease(d)) queues on the shared lease of its TTL,
// then, once granted, moves its key onto a lease of its own, granted then
// (its create revision, the token, is kept), of d rounded up to whole
// seconds plus one second, so that it cannot end on the server before the Core
// ends the hold after d; it is not renewed and is revoked on release. A key
// deleted by hand under a fixed lease is noticed at once by the deletion
// watch, as for a renewed hold, and its lease revoked.
//
// With a lock delay (locker.WithLockDelay) holds go on shared leases of
// their TTL plus the delay, one per delay: the engine refreshes them every
// third of the TTL and loses their holds when the TTL has gone by without
// a refresh, while etcd keeps their keys for the delay after that, which
// bars the name. A fixed lease's own lease is then d plus the delay,
// rounded up to whole seconds, with no extra second (the delay covers the
// Core's end); at its end the key stays until that lease runs out. A
// release deletes the key at once; ForceUnlock too (it bars nothing).
//
// # Client settings
//
// The engine inherits the client's connection behaviour. gRPC's reconnect
// backoff grows to two minutes by default, which can keep a client away from
// a restarted member for longer than a hold's TTL: set
// grpc.WithConnectParams in clientv3.Config.DialOptions (the tests use a 50ms
// base delay and a 500ms cap). Give the client every member's endpoint so
// that it fails over when one dies.
//
// # Clusters: riding through an election
//
// Given a client with several endpoints, the engine treats a member's
// death, a frozen member and a leader election as the cluster's business,
// as long as the cluster keeps its quorum:
//
//   - Ride-through window (WithRideThrough, default DefaultRideThrough,
//     5s): a switcher (switcher.Cluster) opens the engine's breaker only
//     once the engine has failed, without a success, for that long, a
//     refused connection included. It is chosen from etcd's election: a
//     follower that hears nothing from its leader for its election timeout
//     (--election-timeout, default 1000ms, randomised by raft up to twice
//     that) calls an election, won within a round of (pre-)votes: a new
//     leader within about 2s of the old one's death or freeze, or 4s when
//     the two survivors split their votes and a second round follows, and
//     a second of margin for a loaded host. Set it to about 4 ×
//     --election-timeout + 1s. A cluster that lost its quorum switches
//     within the window plus a health check.
//   - Attempts (WithAttemptTimeout, default DefaultAttemptTimeout, 300ms):
//     a write forwarded to a leader that just died, or sent to a frozen
//     member, is never answered; clientv3's balancer keeps a frozen member
//     until gRPC keepalive drops it. So a request unanswered for the
//     attempt timeout is sent again, to the next member, without giving up
//     on the first, which may still be applied: releases and key creations
//     compare create revisions so that a late attempt does no harm, and a
//     late grant leaves a lease with no key, which etcd ends. Lease
//     refreshes and a waiter's checks have one attempt and are tried again
//     soon. Each request is still bounded by the request timeout.
//   - A waiter's watch shares the engine's one gRPC watch stream, which
//     may sit on the member that froze: while attempts go unanswered (for
//     the ride-through window after the last one), queued waiters also
//     read their place every third of the window.
//
// So callers wait at most the election bound — 2 × the election timeout
// (twice that when the survivors split their votes), plus an attempt
// timeout for a request first sent to the dead leader or the frozen
// member: 2.3s with the defaults, 4.3s after a split vote — plus a round
// trip; a
// follower's death costs the requests that were on it a round trip. With
// one endpoint there is no window (the switcher's breaker trips at the
// first refusal) and a request has one attempt of the request timeout.
//
// What is not ridden out: an attempt sent to a member that froze is read
// when it resumes and may be applied then. Creates and releases are safe
// against that (above); a create given up on entirely (its caller's
// context ended, or every attempt failed) is deleted in the background
// as before, and if it is applied after that deletion its key stands in
// the queue until its lease ends.
//
// # TLS and users
//
// TLS is the client's (clientv3.Config.TLS). gRPC verifies the endpoint's
// host and ignores tls.Config.ServerName; config's tls.server_name wraps
// the transport credentials so that it is honoured. A client that cannot
// complete the handshake reports only its deadline; config.Open adds the
// handshake's own error.
//
// Give each application a user whose role grants readwrite on its prefix
// and nothing else:
//
//	etcdctl role add app1
//	etcdctl role grant-permission app1 readwrite --prefix app1/
//	etcdctl user add app1 && etcdctl user grant-role app1 app1
//
// Everything the engine reads or writes is under "<prefix>/", Ping
// included; leases need no permission. Such a user passes the whole
// conformance suite; an engine given another application's prefix gets
// "permission denied", which the engine reports as locker.ErrPermission.
// Wrong credentials fail clientv3.New itself (rpctypes.ErrAuthFailed).
//
// # Operations
//
// Inspect reports a name's holder and its queued waiters, first in line
// first (owner ID, create revision as token, the time their lease has left),
// with one range read and one TimeToLive per distinct lease. ForceUnlock
// deletes the holder's key if it still has the create revision read (one
// transaction), so the next waiter takes the lock; the forced-out owner's
// engine learns of it at once from its deletion watch (Lost closes, Unlock
// returns ErrLockLost). lockctl holders and lockctl unlock --force use them.
//
// # Errors
//
// Every round trip to etcd is bounded by WithRequestTimeout (default 5s):
// the etcd client retries an unreachable cluster until its context ends.
// Failures wrap locker.ErrUnavailable and the client's error; a refused
// user (permission denied, authentication failed) wraps
// locker.ErrPermission, which a breaker does not count; a lost hold
// wraps locker.ErrLockLost; calls on a closed engine wrap locker.ErrClosed;
// bad names and options wrap locker.ErrInvalidName and
// locker.ErrInvalidArgument. Contention is never an error: a wait whose
// context ends while etcd had answered that the name is held returns
// ctx.Err() itself; one that ends while a request has been unanswered for
// driver.OutageAfter returns an error wrapping ErrUnavailable (LockCtx
// still returns ctx.Err()), and ctx.Err() when for less. A wait
// rides out etcd trouble (a leader election, a restart) for as long as its
// lease lives, then fails with ErrUnavailable.
//
// When the client knows it has no connection (gRPC's connection to every
// endpoint failed: TRANSIENT_FAILURE), Ping and new acquisitions fail at once
// with errors wrapping both locker.ErrUnavailable and locker.ErrRefused,
// instead of waiting the request timeout for clientv3's retries. Give the
// client a short reconnection backoff (gRPC's default grows to two minutes)
// so that it tries again soon after the cluster is back.
package etcd
