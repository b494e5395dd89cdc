// Package redis is the Redis lock engine of orthrus, over go-redis v9: a
// single node, Sentinel (a failover client) or Cluster, through
// goredis.UniversalClient. The README has the measurements this page
// refers to.
//
// # Keys
//
// A lock named N lives in the string <prefix>:{N'} = "<token>:<owner>", with
// a TTL; N' is N with '%', '{' and '}' percent-escaped, so the hash tag is the
// whole name and no two names collide. Its fencing counter
// (<prefix>:{N'}:fence) and its wake-up channel (<prefix>:{N'}:wake) share
// the tag, hence the Cluster slot. A free name keeps only its counter, until
// it expires (WithFenceIdle).
//
// # Algorithm
//
// Acquire, renew and release are each one Lua script of lua/, run by SHA.
// Every write checks the owner and the token, so a late renewal or release
// never touches a newer owner's hold. A grant is INCR of the counter and SET
// NX PX of the lock. A counter that INCR finds missing (new, expired, or
// lost in a restart without persistence) starts from the server clock in
// milliseconds; since a counter only expires once the clock has passed
// every token it gave, tokens keep increasing, with gaps.
//
// A waiter that finds the lock held subscribes to its channel and tries
// again, so a release between the two is not missed; it then sleeps until a
// release is published or the holder's remaining TTL runs out. A release
// publishes only when the channel has subscribers (PUBSUB NUMSUB), which a
// dead waiter's connection takes with it. All waiters of an engine share
// one subscription connection (one per master on Cluster, with sharded
// pub/sub), and a channel is unsubscribed when its last waiter leaves.
//
// The waiters of one process queue in turn: a release wakes the longest
// waiting, a waiter that leaves without the lock hands its turn on, a
// reconnection (which may have lost messages) wakes them all, and a Lock
// that finds waiters of its own process queues behind them rather than
// take the lock back from the waiter its release woke. Across processes
// whoever reaches Redis first after a release gets the lock, unless the
// engine is fair.
//
// One loop per engine renews every hold every TTL/3, in pipelines. With a
// lock delay (locker.WithLockDelay) the key's PX is the TTL plus the delay
// while the Core loses the hold at its TTL: a dead owner's key bars the
// name for the delay; Unlock and ForceUnlock delete it at once.
//
// # Fair mode
//
// WithFair queues the waiters of every mutex under the lock's hash tag:
// <lock>:queue, "<ticket>:<owner>" scored by the ticket, and
// <lock>:queue:exp, the same members scored by the time their place
// expires. A ticket is a value of the fencing counter, drawn by a waiter's
// first attempt that finds the lock taken, so tickets are the arrival order
// and every later token exceeds them. A release publishes the first
// waiter's ticket ("q<ticket>"), and the process holding it wakes that
// waiter alone. Each process refreshes its waiters' places every second
// (one pipeline, no goroutine in between); a place not refreshed for 3.5s
// is evicted by another waiting process's refresh, which wakes the next;
// an evicted waiter whose process was only stalled queues again at its
// ticket. The queue's keys expire with their latest place.
//
// # Read-write locks and semaphores
//
// NewRWLock and NewSemaphore share the mutex's hash tag under keys of their
// own. The read-write lock keeps its writer in <lock>:rw (a string, as the
// mutex), its readers in <lock>:rw:r, and its waiting writers and readers
// in <lock>:rw:ww and <lock>:rw:wr; a semaphore keeps its permit holds
// ("<token>:<permits>:<owner>") in <lock>:sem, its waiters in <lock>:sem:w
// and its count in <lock>:sem:n, a string without TTL stored by the first
// acquisition (SetPermits changes it). The sets are scored by the server
// time at which each entry expires, and the next script that counts them
// drops the entries past it: every hold is its own lease. Each kind takes
// tokens and tickets from one counter of its own (<lock>:rw:fence,
// <lock>:sem:fence), kept as the mutex's.
//
// The grant order is the lock family's rule (internal/lockrule, stated
// once in lua/family.lua and checked by TestModel): strict first come,
// first served per name, among the waiters of one weight (see Weights). A writer gets in when nothing is held and no
// waiter is before it, a reader when no writer holds or waits before it,
// permits when they, those held and those of the waiters before them fit
// the stored count, and a TryLock only when the rule would grant it at the
// end of the queue. A downgrade (the read side taken by the owner of the
// write side) is granted at once, with the writer's token, and holds later
// writers out as any read does.
//
// A waiter draws a ticket when it first finds the name taken, records its
// entry under it, refreshes it at each attempt (one at least every TTL/3),
// and removes it when granted or when it gives up (in the background); a
// dead waiter's entry expires with its TTL, and those behind it wait until
// then. An uncontended acquisition writes no entry. Wake-ups name by
// ticket whom the rule now grants: the first waiting writer ("q<ticket>",
// as a fair mutex's), or the readers or permit waiters before a ticket
// ("b<ticket>"); each process wakes its own waiters with those tickets, so
// a release costs one attempt per waiter that can proceed.
//
// # Weights
//
// A fair engine (WithFair) is a driver.Weigher: locker.WithWeight(w), 1 to
// 10, ranks a waiter among those of its name, heaviest first, then by
// arrival, as internal/lockrule says (TestModelWeights checks the scripts
// against it). Without WithFair a mutex does not queue (waiters race for
// the release), so the Core refuses a weight above 1 on every kind with
// an error wrapping errors.ErrUnsupported.
//
// Every queue (the fair queue, the waiting readers and writers, the
// permit waiters) keeps its waiters under their rank, (10-w)*2^41 +
// ticket: tickets stay below 2^41, so each weight has a band of its own
// and the queue's order is the rule's. A waiter's entry, the wake-ups
// ("q<rank>", "b<rank>") and each process's waiters carry the rank where
// they carried the ticket, so a release wakes the waiter ranked first, not
// the oldest, and a grant is decided and recorded by the one script that
// makes it: holds are keys of their own, so a heavier waiter never takes a
// hold from its holder. A caller's first attempt ranks after every waiter
// of its weight and before every lighter one, so a heavy arrival is
// granted at once when only lighter waiters stand in its way (a waiter
// woken for a free lock has not taken it yet); a TryLock ranks as weight
// 1, so it never passes a waiter. Inspect and InspectFamily list waiters
// in order of arrival, Token their ticket.
//
// Cost: the weight is one more argument of the acquire scripts, and the
// fair queue's head is read with its score; the hand-off to a heavier
// waiter is the same single wake-up and attempt as to the oldest
// (BenchmarkFairHandoffWeighted). Weights trade fairness away: nothing
// ages a waiter, so a steady stream of heavier waiters starves lighter
// ones.
//
// # Guarantees and limits
//
// Mutual exclusion holds on one Redis primary. Replication is
// asynchronous: a Sentinel or Cluster failover can lose a hold granted just
// before it, and a second owner can then get the lock; the old holder
// learns it at its next renewal, within TTL/3 (Lost closes, Unlock returns
// ErrLockLost), and the new owner's token is higher, so a resource that
// keeps the highest token it has seen refuses the old holder. Without
// fencing, use etcd or ZooKeeper. A restart without persistence loses every
// hold the same way. During a rolling upgrade from the versions that kept
// the lock in a hash, the two exclude each other, but Inspect or
// ForceUnlock of a key the other wrote fails (WRONGTYPE).
//
// # Pipelining
//
// The scripts of concurrent callers share round trips: while fewer than 8
// requests or pipelines are in flight, a request is sent at once, on the
// caller's goroutine; past that, new requests queue, and the first of them
// sends the queue as one pipeline when a lane frees. A queued request
// leaves at its caller's deadline if not sent yet. Renewals go in
// pipelines of their own.
//
// # Contexts and failures
//
// go-redis honours a context's deadline only with ContextTimeoutEnabled,
// and its cancellation never: with a context that can end (LockCtx,
// TryLockTimeout), each attempt runs on a worker and the caller returns as
// soon as its context ends; a grant that comes after that is released in
// the background (Close waits for it, bounded). The two goroutine switches
// cost CPU. A request without a deadline (Lock, TryLock) is bounded by
// WithRequestTimeout, on the caller's goroutine with ContextTimeoutEnabled
// (set it; config.Open does), else on a worker. So is a release: with
// ContextTimeoutEnabled it goes out alone, never queued behind another's
// pipeline, on Unlock's goroutine. A deadline that passes while a request
// is on the wire is reported as the deadline.
//
// # TLS, ACL users and Sentinel
//
// TLS is the client's (Options.TLSConfig); a failed handshake fails the
// call at once with the crypto/tls error. Give each application an ACL user
// restricted to its prefix, as ACLCommands shows: another prefix then gets
// NOPERM, reported as locker.ErrPermission, as wrong credentials are.
//
// With Sentinel, pass a failover client: it follows the Sentinels to the
// new master, which keeps the holds it had received (TestSentinelFailover).
// The engine rides failovers through (WithRideThrough): a switcher's
// breaker stays closed meanwhile, and a release refused while the master
// is down is asked again every 50ms within its bound. A bare engine's Lock
// returns ErrUnavailable during a failover.
//
// # Redis Cluster
//
// A name's keys share one slot, so each hold lives on one master. A slot
// migration moves the lock and its counter together, requests follow ASK
// and MOVED, and holds keep their token. Redis drops a slot's shard
// channels when the slot leaves a master: the engine subscribes them again
// on the new master once its slot map shows the move, and the waiters try
// again then.
//
// A master that dies without a replica takes its holds with it (Lost
// closes at their deadline), and its names answer ErrUnavailable until it
// is back; with cluster-require-full-coverage yes, Redis's default, every
// master refuses commands once the cluster marks it failed, so every hold
// is lost. With a replica, the failover keeps the holds it had received if
// the holder's client learns the new master within the TTL: the engine has
// its client reload the slot map (at most every 250ms) when a command gets
// no answer or CLUSTERDOWN. A node that lacks a script (restarted, flushed,
// just promoted) gets that command again as EVAL. A renewal script renews
// up to 128 holds at once, on Cluster those of one name
// (TestClusterSlotMigration, TestClusterMasterKilled, TestClusterFailover).
//
// # Errors
//
// Errors wrap locker.ErrUnavailable when Redis cannot be reached or times
// out, and locker.ErrRefused too when it refused or reset the connection.
// For that to show at once, build the client with DialerRetries 1 and
// MaxRetries -1 (config.Open does): go-redis's defaults retry with
// backoffs before they report a dead server. Contention is never an error;
// a wait whose context ends returns ctx.Err(). Errors wrap
// locker.ErrPermission when Redis refuses the user, and
// locker.ErrPermitsMismatch when a semaphore is opened with another count
// than the stored one.
package redis
