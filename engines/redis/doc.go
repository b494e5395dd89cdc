// Package redis is the Redis lock engine of orthrus, over go-redis v9: a
// single node, Sentinel (a failover client) or Cluster, through
// goredis.UniversalClient.
//
// # Keys
//
// A lock named N lives in the hash <prefix>:{N'} with fields owner and
// token, and a TTL; N' is N with '%', '{' and '}' percent-escaped, so the
// hash tag is the whole name and no two names collide. Its fencing counter
// (<prefix>:{N'}:fence, kept forever, a few bytes per name) and its wake-up
// channel (<prefix>:{N'}:wake) share the tag, hence the Cluster slot.
//
// # Algorithm
//
// Acquire, renew and release are each one Lua script run by SHA. Every
// write checks the owner and the token, so a late renewal or release never
// touches a newer owner's hold. A token is the counter bumped in the
// acquire script, floored at the server clock in milliseconds so that it
// keeps increasing even when a restart without persistence loses the
// counter. Re-entry is counted in the Locker and costs no round trip.
//
// A waiter that finds the lock held subscribes to its channel and tries
// again, so a release between the two is not missed; it then sleeps until a
// release is published or the holder's remaining TTL (returned by the failed
// attempt) runs out, whichever comes first. All waiters of an engine share
// one subscription connection (one per master with Cluster, which uses
// sharded pub/sub so that a release is not broadcast to every node), and a
// channel is unsubscribed when its last waiter leaves.
//
// One loop per engine renews every hold every TTL/3, sending the renewals
// that fall due together in one pipeline.
//
// # Guarantees and limits
//
// Mutual exclusion holds on one Redis primary. Redis replication is
// asynchronous: a Sentinel or Cluster failover can lose a hold that was
// granted just before it, and a second owner can then get the lock. Use
// fencing tokens where that matters. A restart without persistence loses
// every hold; holders learn it at their next renewal (Lost closes).
//
// # Contexts and failures
//
// go-redis honours a context's deadline only with ContextTimeoutEnabled,
// and its cancellation never: with a context that can end, the engine runs
// each attempt on a goroutine of its own and returns as soon as the context
// ends; an attempt that was granted after its caller left is released in
// the background (Close waits for that, bounded). Commands on a background
// context (Lock, TryLock) are bounded by the client's ReadTimeout. Set
// ContextTimeoutEnabled anyway, so that the abandoned command ends at the
// deadline too.
//
// # TLS, ACL users and Sentinel
//
// TLS is the client's: goredis Options.TLSConfig, with Certificates for a
// server started with tls-auth-clients yes. A handshake that fails (unknown
// CA, wrong server name, no client certificate) fails the call at once with
// the crypto/tls error ("tls: failed to verify certificate: ...").
//
// Give each application an ACL user restricted to its prefix: its keys and
// its wake-up channels both start with "<prefix>:", and it needs the
// commands of ACLCommands, which Redis also checks inside the scripts:
//
//	ACL SETUSER app1 on >secret ~app1:* &app1:* -@all +evalsha +eval ... (ACLCommands)
//
// Such a user passes the whole conformance suite; an engine given another
// application's prefix gets NOPERM on every call, which the engine reports
// as locker.ErrPermission, as it does wrong credentials (WRONGPASS,
// NOAUTH).
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
// user (the breaker does not count those). Close releases the holds still held and closes the
// subscriptions; it never closes the client.
package redis
