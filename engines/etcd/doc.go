// Package etcd is the orthrus lock engine for etcd v3: lease-bound keys
// ordered by create revision, each waiter watching only what blocks it;
// mutexes, fair read-write locks and FIFO semaphores; waiters of mutexes
// and read-write locks may be ranked by weight.
//
//	client, err := clientv3.New(clientv3.Config{Endpoints: endpoints})
//	...
//	defer client.Close()
//	engine, err := etcd.New(client, etcd.WithPrefix("myapp/locks"))
//	...
//	defer engine.Close()
//	l, err := engine.NewLocker("orders/42")
//
// The caller owns the client (endpoints, credentials, TLS): the engine
// never closes it. Close the engine first; see Engine.Close.
//
// # Keys
//
// Everything lives under "<prefix>/" (WithPrefix, default "orthrus"). A
// name is escaped ('%' as "%25", '/' as "%2F") into one segment, so a
// name's keys never mix with another's:
//
//	<prefix>/<name>/<lease hex>-<slot>        a mutex hold or waiter; value: owner ID
//	<prefix>/<name>/h/<lease hex>-<slot>      one of weight > 1; value: "<weight> <grants> <owner>"
//	<prefix>/%rw/<name>/r/<lease hex>-<slot>  a reader (r/h/...: of weight > 1)
//	<prefix>/%rw/<name>/w/<lease hex>-<slot>  a writer (w/h/...: of weight > 1)
//	<prefix>/%rw/<name>/d/<rev>/<lease hex>-<slot>  a read downgraded from the write hold of key revision <rev>
//	<prefix>/%sem/<name>/permits              a semaphore's stored count, on no lease
//	<prefix>/%sem/<name>/q/<lease hex>-<slot> a permit hold or waiter; value: "<permits> queued|granted <owner>"
//	<prefix>/%epochs/<fleet>                  a switcher's epoch record
//
// A slot is an acquisition's until its key is known to be gone, so no two
// holds share a key; slots are reused (mostly slot 0), because etcd's key
// index keeps every key name until a compaction.
//
// # Guarantees
//
//   - Exclusion with etcd's strong consistency: the key with the lowest
//     create revision in a mutex's range holds it (with heavy keys, the
//     one the rule grants). The token is that create revision, or, in a
//     name where a heavy key passed an older one, a waited grant's is the
//     revision that granted it (see "Weights"): it grows with every grant
//     in the cluster, survives leader changes and restarts, and compares
//     only within one cluster.
//   - FIFO within a weight: waiters are granted in the order their keys
//     were created, each watching only the key that blocks it (no herd);
//     in queues longer than
//     64 a granted key is marked, so that a hand-off costs one request
//     whatever the queue's length. TryLock leaves nothing behind on
//     contention and never jumps the queue.
//   - Read-write locks are fair (a reader waits behind a waiting writer) and
//     a downgrade is one transaction that keeps the writer's token; upgrades
//     are refused (ErrUpgrade). Semaphores are FIFO: no acquisition gets
//     ahead of a waiter, even one that would fit. The count is stored on
//     the first acquisition; a Semaphore opened with another count fails
//     with ErrPermitsMismatch; SetPermits changes it. The grant order is
//     internal/lockrule's.
//   - Weights (locker.WithWeight, see below) on mutexes and read-write
//     locks; a semaphore refuses a weight above 1 (errors.ErrUnsupported).
//   - Liveness: holds and waiters with the same TTL (rounded up to whole
//     seconds, at least MinTTL) share a lease of up to WithKeysPerLease
//     keys, which one keeper refreshes with a KeepAliveOnce every third of
//     its TTL. A lease not refreshed within its TTL, as the engine counts
//     it, loses its holds (Lost closes, a WARN) before the server can end
//     it. A fixed lease (locker.WithLease) moves its key, once granted, to
//     a lease of its own that is not renewed. With a lock delay
//     (locker.WithLockDelay) the leases outlive their holds by the delay.
//   - A held key deleted by hand (ForceUnlock, etcdctl del) is noticed at
//     once by one deletion watch on the namespace, with a check of every
//     held key after a compaction and a check per lease every TTL as a
//     fallback; the hold is lost with cause observe.LostGone. The watch
//     runs only while a hold has lived 10 to 20 ms, as ZooKeeper's watch on
//     a held node, and stops 20 ms after no hold has: it receives every deletion in the namespace, other
//     processes' too, which holds released sooner do not need (their
//     Unlock finds the key gone and returns ErrLockLost). It starts from
//     the oldest held key's creation, so a key deleted before is noticed
//     then: etcd sends such a replay at its next catch-up of lagging
//     watches, about 100 ms after the grant in all.
//   - Cancellation: a cancelled wait returns at once, even when etcd does
//     not answer; its key is deleted in the background, or before its
//     lease is refreshed again, or expires with it.
//
// # Weights
//
// A waiter of weight > 1 ("heavy") is granted before every lighter one,
// older or not; within a weight the order is FIFO, a holder keeps its
// hold, TryLock ranks as without a weight, and nothing ages a weight, so
// a steady stream of heavy waiters starves light ones. The grant order is
// still derived from the queue: only a heavy arrival can rank ahead of an
// older key, so it records, in its key's value, the create revisions of
// the keys granted when it came (grants). It reads the queue at revision
// R and creates its key in a transaction that compares the create
// revision of every key read and that no key of the queue is newer than
// R: any key created or deleted in between fails it, and that
// transaction reads the queue again for the next try (as often as it
// takes, within the caller's context). Every decision over a queue
// holding a heavy key is lockrule.DecideHeld, with the keys some heavy key
// recorded (and downgrades, and keys rewritten once granted) as granted.
//
// Why that is safe: a key E that concluded it holds did so on a read at or
// before the heavy key W's (a later one shows W and its grants). Between
// the two, deletions never take a grant back (the rule is monotone in
// them), weight-1 arrivals rank behind E and heavy ones record E: so E is
// among W's grants. A key not among them was waiting when W came, and W
// may rank ahead of it.
//
// Tokens still grow with every grant: a key granted after a heavier, newer
// one held would hold with a lower create revision. So a heavy arrival
// that may pass an older key writes "<prefix>/%floor/<queue>" in its
// create (a key on no lease, one per name that ever had such a waiter,
// never deleted). Once the floor exists, a key granted after waiting takes
// as its token the revision of the read that granted it (one granted with
// no read, by the deletion of the key it waited for: that deletion's), and
// nothing is written: the holder before it had a token no newer than its
// own grant, and was deleted at or before that revision. Readers
// granted by one read or one deletion share a token (readers are not
// fenced against each other); a writer's is above every earlier reader's.
// A key granted at its create, and any key in a name with no floor, keeps
// its create revision, as without weights. Inspect shows a key's create
// revision, which for a hold granted by a read is not its token.
//
// The cost: a weight-1 waiter's check counts the heavy keys (h/) and reads
// the floor in the same transaction, and decides as without weights when
// there are none; once it has seen one, each check reads the whole queue.
// A waiter that only one key stands before (a mutex's, deciding from the
// whole queue, or a reader whose only older writer blocks it) holds with
// no request when that key goes: it watches a range (a mutex's queue; for
// a reader, from the heavy readers' keys to the end of the writers') and
// reads its place again when a key comes that may pass it or create the
// floor (a mutex's waiter, also when its own key is deleted). A reader
// reads the floor in its create. A heavy arrival is two requests (a
// read, then the create) instead of one; when the queue changed in
// between, the failed create's transaction reads it again for the next
// try. Measured on one local etcd: a hand-off among owners of weights 1,
// 3, 2 and 10 takes 1.06x the time of one among four of weight 1 (p50,
// median of 7 rounds; 1.25x in the same rounds for the version whose
// grant out of arrival order wrote the floor again, after a read), about
// 2.5 creates per heavy arrival; unweighted Lock+Unlock and hand-offs are
// unchanged. A heavy arrival
// behind 128 keys or more is refused with errors.ErrUnsupported: etcd's
// default max-txn-ops bounds the compares of one transaction.
//
// Rolling upgrade: while every waiter has weight 1 there is no floor, and
// this version writes and reads the keys the version before wrote and
// read, with the same tokens (a writer's is its create revision, which
// names its downgrade), so a fleet can mix them. Upgrade every process
// before any uses a weight: an older one ignores the heavy keys' records
// and the floor, and one that rewrote the floor at such a grant expects
// every other process to do so.
//
// # Options
//
//	WithPrefix          the namespace                          "orthrus"
//	WithRequestTimeout  bound of every round trip              2s; 5s with several endpoints
//	WithRideThrough     failures a switcher lets pass          0; 5s with several endpoints
//	WithAttemptTimeout  one attempt before sending again       the request timeout; 300ms with several
//	WithKeysPerLease    keys sharing one lease                 5000
//	WithName, WithLogger, WithObserver                         "etcd", slog.Default(), none
//
// # Clusters
//
// With several endpoints the engine rides out a leader election:
// WithRideThrough (default 5s) is how long a switcher lets it fail before
// its breaker opens, and WithAttemptTimeout (default 300ms) is how long a
// request may go unanswered before it is sent again to the next member.
// Creates, releases and lease grants are safe to send twice (they compare
// create revisions, or leave a lease with no key that etcd ends). Set
// grpc.WithConnectParams in clientv3.Config.DialOptions: gRPC's default
// reconnect backoff grows to two minutes, longer than a TTL.
//
// # Users and TLS
//
// TLS is the client's. A user needs readwrite on "<prefix>/" and nothing
// else (leases need no permission):
//
//	etcdctl role add app1
//	etcdctl role grant-permission app1 readwrite --prefix app1/
//	etcdctl user add app1 && etcdctl user grant-role app1 app1
//
// # Errors
//
// Every round trip is bounded by WithRequestTimeout. Failures wrap
// locker.ErrUnavailable (and locker.ErrRefused when the client has no
// connection at all); a refused user wraps locker.ErrPermission; a lost
// hold locker.ErrLockLost; a closed engine locker.ErrClosed; bad names and
// options locker.ErrInvalidName and locker.ErrInvalidArgument. Contention
// is never an error: a wait whose context ends while the name is held
// returns ctx.Err().
package etcd
