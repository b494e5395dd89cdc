// Package redis is the Redis lock engine of orthrus, over go-redis v9: a
// single node, Sentinel (a failover client) or Cluster, through
// goredis.UniversalClient.
//
// # Keys
//
// A lock named N lives in the string <prefix>:{N'} = "<token>:<owner>", with
// a TTL; N' is N with '%', '{' and '}' percent-escaped, so the hash tag is the
// whole name and no two names collide. Its fencing counter
// (<prefix>:{N'}:fence) and its wake-up channel (<prefix>:{N'}:wake) share
// the tag, hence the Cluster slot. A free name keeps only its counter, and
// only for a while: it expires WithFenceIdle after the server clock passes
// the last token it gave, so names locked once leave no key behind.
//
// # Algorithm
//
// Acquire, renew and release are each one Lua script run by SHA, with an
// integer reply. Every write checks the owner and the token, so a late
// renewal or release never touches a newer owner's hold. A grant is two
// commands: INCR of the counter, SET NX PX of the lock (on contention, a
// PTTL as well: the remaining time is the reply). A counter that INCR finds
// missing (new, expired, or lost in a restart without persistence) starts
// from the server clock in milliseconds; since a counter only expires once
// the clock has passed every token it gave, tokens keep increasing; an
// attempt that finds the lock held uses up a value, so tokens have gaps.
// Re-entry is counted in the Locker and costs no round trip.
//
// A waiter that finds the lock held subscribes to its channel and tries
// again, so a release between the two is not missed; it then sleeps until a
// release is published or the holder's remaining TTL (returned by the failed
// attempt) runs out, whichever comes first. A release publishes only when
// the channel has subscribers: Redis counts them itself (PUBSUB NUMSUB), and
// a waiter that dies takes its subscription with its connection, so a dead
// waiter never leaves the count up. All waiters of an engine share one
// subscription connection (one per master with Cluster, which uses sharded
// pub/sub so that a release is not broadcast to every node), and a channel
// is unsubscribed when its last waiter leaves.
//
// The waiters of one process queue in turn: a release message wakes one of
// them, the longest waiting, rather than all of them to find the lock taken
// again; a waiter that leaves without the lock hands its turn to the next;
// a reconnection, which may have lost messages, wakes them all; and a Lock
// or LockCtx that finds waiters of its own process queues behind them
// instead of trying first, so that an owner that unlocks and locks again
// does not take the lock back from the waiter its release woke. TryLock
// still makes its one attempt. Across processes there is no queue:
// whoever's attempt reaches Redis first after a release gets the lock,
// unless the engine is fair (below).
//
// One loop per engine renews every hold every TTL/3, sending the renewals
// that fall due together in one pipeline. A TTL or fixed lease below
// MinTTL is refused with an error naming the option. With a lock delay
// (locker.WithLockDelay) the key's PX is the TTL plus the delay, at the
// grant and at each renewal, while the Core loses the hold at its TTL: a
// dead owner's key bars the name for the delay. Unlock and ForceUnlock
// delete it at once.
//
// # Fair mode
//
// WithFair (config: engines[].fair) queues the waiters of every mutex on
// Redis, under the lock's hash tag: <lock>:queue, a sorted set of
// "<ticket>:<owner>" scored by the ticket, and <lock>:queue:exp, the same
// members scored by the time their place expires. A ticket is a value of the
// fencing counter, drawn by a waiter's first attempt that finds the lock
// taken, so tickets are the arrival order and every later token exceeds
// them. A release wakes the first waiter's process alone, with a message
// naming the ticket ("q<ticket>"): that waiter makes one attempt, the others
// sleep on, so a grant costs one attempt whatever the number of waiters.
// Re-entry, tokens, the watchdog, fixed leases, Lost and ForceUnlock are the
// default mode's; the hold itself is the same key.
//
// Each process refreshes the places of its waiters every second, one
// script per name in one pipeline, and no goroutine runs in between. A
// waiter that gives up leaves the queue at once (in the background, as a
// cancelled wait returns at once); when it was first and the lock is free,
// the next is woken. A waiter whose process dies, or stalls, keeps its place
// until it expires, 3.5s after its last refresh; the refresh of any other
// process waiting for the name then evicts it and wakes the next, within
// FairEviction (4s measured in TestFairDeadWaiterEvicted). A waiter evicted
// while its process stalled takes its place again, by its ticket, at its
// next attempt. The queue's keys expire with their latest place, so a name
// left idle leaves nothing behind. Inspect lists the queue in Waiters,
// first in line first (Token is the ticket, TTL the time the place has
// left), and counts no Subscribers.
//
// The fair scripts do a little more work in Redis than the default ones, in
// the same round trips; a release to an empty queue costs one EXISTS more.
// With eight owners taking turns in one process, a grant costs 2.1 attempts
// instead of 1.3, and the median hand-off is about 1.5 times the default
// mode's (BenchmarkFairHandoff, about 0.19ms against 0.13ms on one
// machine). 1,000 waiters of one process pass through in about 0.2s in
// either mode, one attempt per grant (BenchmarkFairPassThrough).
//
// # Read-write locks and semaphores
//
// NewRWLock and NewSemaphore share the mutex's hash tag, under keys of their
// own, so the mutex, the read-write lock and the semaphore of one name are
// independent. The read-write lock keeps its writer in <lock>:rw (a string
// "<token>:<owner>" with a TTL, as the mutex), its readers in <lock>:rw:r,
// and the writers and the readers waiting in <lock>:rw:ww and <lock>:rw:wr,
// sorted sets scored by the server time at which each entry expires; every
// hold is its own lease (renewed by the watchdog, expiring at its own TTL),
// and an entry whose time has passed is dropped by the next script that
// counts them. Readers and writers take their tokens from one counter,
// <lock>:rw:fence, kept as the mutex's is: every grant's token exceeds
// those of all earlier grants of the name, a writer's included.
//
// The grant order is the lock family's rule (internal/lockrule, stated
// once in lua/family.lua and checked by TestModel): strict first come,
// first served per name, so writers never starve. The waiters queue by
// ticket (below); a writer gets in when nothing is held and no waiter is
// before it, a reader when no writer holds or waits before it, and a
// TryLock only when the rule would grant it at the end of the queue. A
// downgrade (the read side taken by the owner of the write side) is
// granted at once, with the writer's token, while the write hold is still
// on the server, and holds later writers out as any read does.
//
// A semaphore keeps its permit holds in <lock>:sem, a sorted set of
// "<token>:<permits>:<owner>" scored by expiry, its counter in
// <lock>:sem:fence, and its count in <lock>:sem:n, a string without TTL:
// one small key per semaphore name that outlives idle periods, stored by
// the first acquisition and changed by SetPermits (lockctl). An
// acquisition is granted when its permits, those of the live holds and
// those of the waiters before it fit in the stored count: permit waiters
// queue first come, first served (in <lock>:sem:w, "<ticket>:<permits>:
// <owner>" scored by expiry), so a large request is not passed by small
// ones. It costs O(holds + waiters) in the script.
//
// Every waiter, reader, writer or permit waiter, draws a ticket from the
// name's counter when it first finds the lock or the permits taken, records
// itself under it, refreshes its entry at each attempt (it makes one at
// least every TTL/3 while it waits), and removes it when it is granted or
// gives up (in the background, as a cancelled wait returns at once): the
// entry of a waiter whose process dies, or that cannot reach Redis to
// withdraw, expires with its TTL (until then it holds those behind it).
// The entries are written only on the waiting path: an uncontended
// acquisition only checks that none exists.
//
// Wake-ups go through the same shared subscription, one channel per lock
// (<lock>:rw:wake, <lock>:sem:wake), and name by ticket whom the rule now
// grants: a release or a withdrawal wakes the readers that queued before
// the first waiting writer, or that writer alone when it is first in line
// and nothing is held; a permit's release, a withdrawal or SetPermits
// wakes the permit waiters the rule grants, first come first, and nobody
// while the first in line does not fit. Each process wakes its own
// waiters with those tickets, so a release costs one attempt per waiter
// that can proceed.
// ForceUnlockFamily wakes them as a release would.
//
// Failures are the mutex's: a hold whose entry vanished (expiry, a restart
// without persistence, an operator) is reported at its next renewal (Lost
// closes, Unlock returns ErrLockLost). A semaphore opened with another
// count than the stored one fails its first acquisition with
// locker.ErrPermitsMismatch, which is not an outage.
//
// # Guarantees and limits
//
// Mutual exclusion holds on one Redis primary. Redis replication is
// asynchronous: a Sentinel or Cluster failover can lose a hold that was
// granted just before it, and a second owner can then get the lock. Use
// fencing tokens where that matters. A restart without persistence loses
// every hold; holders learn it at their next renewal (Lost closes).
//
// Versions before the fence keys expired kept the lock in a hash. During a
// rolling upgrade the two exclude each other (both see the key), but
// Inspect or ForceUnlock of a key the other version wrote fails with
// ErrUnavailable (WRONGTYPE).
//
// # Pipelining
//
// The acquire and release scripts of concurrent callers share round trips:
// an idle engine sends a request at once, on the caller's goroutine and
// context; while one is in flight, new requests queue, and the first of
// them sends the whole queue as one pipeline when the one in flight
// lands. Redis then reads, runs and answers several scripts per system call
// instead of one, which is most of a lock's cost on a busy host (8 owners
// on 8 names: see the README). A queued request leaves at its caller's
// deadline if it has not been sent yet; a pipeline lasts as long as its
// most patient caller allows. Renewals go in pipelines of their own.
//
// # Contexts and failures
//
// go-redis honours a context's deadline only with ContextTimeoutEnabled,
// and its cancellation never: with a context that can end (LockCtx,
// TryLockTimeout), the engine runs each attempt on a worker goroutine of its
// own and returns as soon as the context ends; an attempt that was granted
// after its caller left is released in the background (Close waits for that,
// bounded). The hand-over allocates nothing, but the two goroutine switches
// it takes cost CPU: an uncontended cycle through LockCtx with a
// cancellable context is markedly slower than through Lock (see the README's
// benchmarks). A request whose context has no deadline (Lock, TryLock) is
// bounded by WithRequestTimeout, on the caller's goroutine with
// ContextTimeoutEnabled, else on a worker, with the same two switches. Set
// ContextTimeoutEnabled (config.Open does), so that Lock and TryLock take
// the fast path and an abandoned command ends at its deadline too; a
// deadline that passes while a request is on the wire is still reported
// as the deadline (LockCtx returns ctx.Err()), not as the socket's timeout.
//
// # TLS, ACL users and Sentinel
//
// TLS is the client's: goredis Options.TLSConfig, with Certificates for a
// server started with tls-auth-clients yes. A handshake that fails (unknown
// CA, wrong server name, no client certificate) fails the call at once with
// the crypto/tls error ("tls: failed to verify certificate: ...").
//
// Give each application an ACL user restricted to its prefix, as
// ACLCommands shows. Such a user passes the whole conformance suite; an
// engine given another application's prefix gets NOPERM on every call,
// which the engine reports as locker.ErrPermission, as it does wrong
// credentials (WRONGPASS, NOAUTH).
//
// With Sentinel, pass a failover client (goredis.NewFailoverClient, or a
// UniversalClient with MasterName): it follows the Sentinels to the new
// master. A failover keeps the holds the new master had received and loses
// those it had not: Redis acknowledges a write before it reaches the
// replicas, so a hold granted in the last moments before the master died
// may be missing on the replica that takes over (the async replication
// window; WAIT narrows it but does not close it). The engine notices at the
// hold's next renewal, within TTL/3: Lost closes and Unlock returns
// ErrLockLost. Until then, the old holder may still act while a new owner
// has the lock; the new owner's token is higher (the acquire script floors
// the counter at the server clock in milliseconds, so a lost counter does
// not move tokens back), so a resource that keeps the highest token it has
// seen refuses the old holder. Without fencing, use etcd or ZooKeeper,
// whose writes are acknowledged by a quorum. TestSentinelFailover shows
// both cases with a master, a replica and three Sentinels.
//
// An engine over a failover client rides its failovers through: it is a
// switcher.Cluster whose window (WithRideThrough) keeps a switcher's
// breaker closed while the master is down, so a failover moves no
// acquisition to the next engine. A release refused meanwhile (the command
// never left) is asked again every 50ms within its bound, so that it lands
// as soon as the new master is reached. Requests do not ride through on
// their own: a bare engine's Lock returns an error wrapping
// locker.ErrUnavailable during a failover, which a switcher retries. With
// a 1s down-after, acquisitions through a switcher resumed 0.18s (median
// of 10) and at most 0.93s (1.03s once, in a CI run) after the Sentinels
// agreed on the new master, 2.2-2.3s after a SIGKILL of the old one (up to
// a second because a go-redis pool that has failed as many dials as its
// size dials again only once a second), with no switch, and replicated
// holds with a 6s TTL were kept (TestSentinelRideThrough,
// BenchmarkSentinelRideThrough). Over a single node or Cluster the window
// is 0: a killed node switches at once.
//
// # Redis Cluster
//
// A name's keys share one slot, so each hold lives on one master. When its
// slot migrates (resharding), the lock and its counter move together with
// MIGRATE and requests follow go-redis's ASK and MOVED redirections: holds
// keep their token and stay exclusive, and tokens keep increasing. Redis
// drops a slot's shard channels when the slot leaves a master: the engine
// subscribes its waiters' channel again on the new master once its client's
// slot map shows the move, and the waiters try again then, so a release
// still wakes them.
//
// A master that dies without a replica takes its holds with it: renewals
// fail, Lost closes at the hold's deadline (at most a TTL after the last
// renewal that worked), and its names answer ErrUnavailable until it is
// back, empty without persistence (tokens still increase, as above). With
// cluster-require-full-coverage yes, Redis's default, the other masters
// refuse every command once the cluster marks the master failed
// (cluster-node-timeout), so every hold in the cluster is lost; set it to
// no to keep them. With a replica, the failover loses the holds the replica
// had not received, as with Sentinel, and keeps the others if the holder's
// client learns the new master within the TTL. A ClusterClient reloads its
// slot map on a redirection or every ClusterStateReloadInterval (default
// 60s), not when a master stops answering, so the engine has it reload the
// map (at most every 250ms) when a command gets no answer or CLUSTERDOWN:
// the renewals retried after the replica's promotion (cluster-node-timeout
// and an election, about 2s with a 1s timeout) go to the new master. A TTL
// shorter than the failover loses the holds, reported lost, never held
// twice.
//
// Every script runs by its SHA; a node that lacks it (restarted, flushed,
// or a replica just promoted) gets that one command again as EVAL, so a
// dead node elsewhere in the cluster does not matter (SCRIPT LOAD through a
// ClusterClient goes to every master). A renewal script renews up to 128
// holds at once on a single node or Sentinel, and the holds of one name on
// Cluster, where a script's keys must share a slot; the calls of a chunk
// go in one pipeline. TestClusterSlotMigration, TestClusterMasterKilled and
// TestClusterFailover show each case.
//
// # Errors
//
// Errors wrap locker.ErrUnavailable when Redis cannot be reached or times
// out, and also locker.ErrRefused when it refused or reset the connection:
// it is down, not slow. For that to show at once, build the client with
// DialerRetries 1 and MaxRetries -1 (config.Open does): by default go-redis
// dials five times and retries a command three times, with backoffs, before
// it reports a dead server. Contention is never an error; a wait whose
// context ends while Redis had answered that the name is held returns
// ctx.Err() itself. Errors wrap locker.ErrPermission when Redis refuses the
// user (the breaker does not count those). Close releases the holds still
// held and closes the subscriptions; it never closes the client.
package redis
