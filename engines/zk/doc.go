// Package zk is the ZooKeeper lock engine of orthrus, over
// github.com/go-zookeeper/zk (imported as gozk).
//
//	e, err := zk.New([]string{"zk1:2181", "zk2:2181", "zk3:2181"},
//		zk.WithPrefix("/myapp/locks"), zk.WithSessionTimeout(10*time.Second))
//	if err != nil { ... }            // errors.Is(err, locker.ErrUnavailable): no session in time
//	defer e.Close()
//	l, err := e.NewLocker("order/42")
//
// # The algorithm
//
// The engine owns one connection and one session; New waits for the session
// (at most WithConnectTimeout) and fails with an error wrapping
// locker.ErrUnavailable when it does not come. Every lock has a parent node
// (see "Parent nodes" below): <prefix>/<escaped name> for a mutex. An
// acquisition creates an ephemeral sequential node
// "_c_<guid><marker><sequence>" under it, with the owner ID as data; the
// marker says what it holds ("-lock-" a mutex), so that one listing of the
// parent decides a grant, by the lock family's one rule
// (internal/lockrule): the lowest node holds a mutex, and every other node
// watches only the node just before its own, so a release wakes one waiter
// (no herd effect) and waiters are served in the order they queued (FIFO).
// TryLock creates its node, and deletes it again when it is not granted.
// Re-entry is counted in the process and costs no round trip.
//
// Uncontended, a Lock and Unlock make the three requests of go-zookeeper's
// own lock recipe (create, list, delete), and the listing is sent right
// behind the create instead of after its reply.
//
// A create whose reply is lost with the connection may still have made the
// node; the guid in the name lets the engine find its node after the
// reconnection instead of leaving an orphan in the queue (Curator's
// protected mode). A wait that is cancelled or times out returns at once and
// its node is deleted in the background, as soon as the ensemble answers;
// nodes that cannot be deleted within the connect timeout (the ensemble is
// away) are deleted later, once it answers, or disappear with the session.
//
// # Liveness: the session
//
// ZooKeeper keeps no per-hold TTL: a hold lives as long as the engine's
// session. The session timeout (WithSessionTimeout, default 10s, clamped by
// the server into its [minSessionTimeout, maxSessionTimeout]) is how long a
// dead or cut-off process keeps its holds. locker.WithTTL does not change
// it, and no renewal traffic is sent: the client's pings keep the session,
// and with it every hold, alive. locker.WithLease(d) is honoured: the node
// is deleted, and Lost closes, when the lease ends. A TTL or lease below
// MinTTL (100ms) is refused with an error naming the option.
//
// Lost closes when the session expires, and when the engine, disconnected,
// has not heard from the ensemble for the session timeout: from then on the
// server may have expired the session and granted the lock to another
// owner, so the engine reports the loss without waiting for a reconnection
// to confirm it (and deletes the node should the session have survived). A
// disconnection shorter than that, to any server of the ensemble, keeps
// every hold. After an expiry the client opens a new session for new
// acquisitions on its own.
//
// Lost also closes when someone else deletes the hold's node (an operator,
// say), within milliseconds, with cause observe.LostGone: the engine sets a
// watch on the node when the hold is granted, in the background (a node
// deleted before the watch is set is found by the watch's read), so every
// hold costs one read besides its create, listing and delete. The engine's
// own delete on Unlock is never reported. locker.WithTTL changes nothing
// here.
//
// A lock delay (locker.WithLockDelay) cannot ride on an ephemeral node,
// which goes with its session: a hold with a delay keeps a persistent
// marker node "<lock>/delay" that its Unlock deletes first (one create and
// one delete more per hold; none without a delay). The next holder with a
// delay that finds a marker left behind (a session expired, a fixed lease
// ended, an operator deleted the node) waits the delay, timed by the
// server's clock from the moment the first of them found it (TryLock
// returns false meanwhile), then takes the marker over. Lockers without a
// delay ignore the marker: give every Locker of a name the same delay.
//
// # Parent nodes
//
// A lock's parent is created by the first acquisition that finds it
// missing, as a container node (ZooKeeper 3.5.3 or later), and lives as long
// as nodes come and go under it. Once the engine's last node under a parent
// has been gone for WithParentLinger (default 5s), the engine deletes the
// parent, on a goroutine of its own, 16 deletes in flight: a name locked
// again within the linger pays nothing, one locked later pays one more
// request to create the parent again. The delete carries the parent's data
// version that the engine's latest create returned (each create writes the
// parent in the same transaction), so it fails, harmlessly, when any process
// acquired the name since, or when the parent has children, which ZooKeeper
// never deletes: it cannot race with a waiter, and in a fleet the last
// process to use a name deletes its parent. An acquisition that finds the
// parent deleted just before its create makes it again. The server's
// container reaper stays the backstop for parents that a process that died
// left behind: it deletes about 10k a minute by default
// (znode.container.maxPerMinute), so 100k of them take some ten minutes,
// whereas the engine deletes the parents of 100k released names within
// seconds of the linger. WithParentLinger(0) leaves every parent to the
// reaper.
//
// # Fencing tokens
//
// A hold's token is its node's czxid, the zxid of the transaction that
// created it. zxids increase over the whole history of an ensemble, across
// leader elections and across the deletion and re-creation of a lock's
// parent, and the lowest node is always the oldest, so tokens increase with
// every grant of a name. The create writes the parent's (empty) data in the
// same transaction, so the parent's mzxid in the reply is the czxid, at no
// extra round trip; the parent's data version counts the acquisitions.
// Tokens are comparable only with tokens of the same ensemble, not with
// tokens of another engine or of an ensemble rebuilt from scratch.
//
// # Read-write locks and semaphores
//
// NewRWLock and NewSemaphore queue their nodes on the same wait loop as the
// mutex, under parents of their own, <prefix>/%rw/<escaped name> and
// <prefix>/%sem/<escaped name> (a name's '%' is escaped, so no mutex
// collides with them), with the markers "-r-" a reader, "-w-" a writer,
// "-d<token>-" a downgraded reader and "-p<n>-" n permits. Holds end with
// the session, report Lost, honour fixed leases and leave nothing behind
// when a wait is cancelled, as the mutex's do; tokens are node czxids.
//
// The read-write lock is fair: one queue for both sides. A reader holds
// when no writer is before it in line and watches only the last writer
// before it; a writer holds when it is first in line and watches only the
// node just before it. A reader behind a waiting writer waits, so writers
// do not starve, and a writer's release wakes the readers queued up to the
// next writer and no one else. Both sides share the czxid sequence: a
// writer's token exceeds every earlier reader's. A downgrade (the read
// side taken while the owner holds the write side) creates its node in one
// transaction that checks the write node still exists: it holds at once,
// with the write hold's token, and every writer waits for it whatever its
// place in line. When the write node is gone, the read side queues as any
// reader. Taking the write side while holding the read side fails with
// locker.ErrUpgrade.
//
// The semaphore is FIFO. Its permit count is stored in the persistent node
// <prefix>/%sem/<escaped name>/permits, in decimal, written by the first
// acquisition that finds none with the count the Semaphore was opened
// with; it outlives idle periods and every process, and keeps the
// semaphore's parent (which the engine never deletes). SetPermits changes
// it. A node holds when its permits and those of every node before it fit
// the stored count: grants follow the queue, and a large request is not
// overtaken. The first waiter that does not fit watches the nodes before
// it and the count node; every other waiter watches only the node before
// it, which, once granted, changes its data when its successor has to look
// again; one behind a node granted already, under a higher count, watches
// all the nodes before it instead. Every waiter watches the count node as
// well, so that SetPermits wakes them all. The first acquisition of a Semaphore opened with another
// count than the stored one fails with locker.ErrPermitsMismatch, naming
// both: the counts are compared once, on arrival, as the in-memory engine
// does; a count changed while it waits does not fail it. A request for
// more permits than are stored waits until SetPermits raises the count.
// After SetPermits lowers the count, holds already granted stay: it writes
// their nodes' data in the transaction that stores the count, and a node
// whose data was written counts as held for InspectFamily whatever the
// count. A waiter may wait for the holders granted under the old count to
// go.
//
// # Names
//
// Any name driver.ValidateName accepts, up to driver.MaxNameLen bytes, is
// one node name: '/', '%', the characters ZooKeeper rejects in paths
// (control characters, U+007F-U+009F, U+D800-U+F8FF and so every character
// beyond U+FFFF, U+FFF0-U+FFFF) are percent-encoded byte by byte, and so
// are the dots of "." and "..". The mapping is injective: two names never
// share a lock.
//
// # Access control
//
// WithAuth authenticates the session: every node the engine then creates,
// namespace included, is closed to clients without the same credentials.
// Without credentials nodes are open to all.
//
// # Operations
//
// Inspect and InspectFamily report a lock's holds and waiters, in line
// order, from one listing and one read per node, in parallel; which nodes
// hold is decided from the listing by the rule the acquisitions follow.
// ForceUnlock and ForceUnlockFamily delete a hold's node only if it still
// has the version read, so they never end a hold granted after their look:
// waiters take their turn as after a release, and the forced-out owner's
// engine learns of it at once from its watch on the node (Lost closes,
// Unlock returns ErrLockLost). The deletes are not one transaction: should
// the ensemble fail midway, the call returns the holds already ended with
// its error. All are bounded by their context and the connect timeout;
// lockctl holders and lockctl unlock --force use them.
//
// # TLS
//
// WithTLS connects to the servers' secureClientPort, which ZooKeeper
// serves only with the Netty connection factory
// (serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory,
// ssl.keyStore.* and ssl.trustStore.*, PEM files accepted,
// ssl.clientAuth=need for mutual TLS). Debian's zookeeper 3.8.0 package
// leaves netty-codec out of zookeeper.jar's classpath: append
// /usr/share/java/netty-codec.jar, netty-resolver.jar and
// netty-transport-native-unix-common.jar to CLASSPATH in
// /etc/zookeeper/conf/environment, or every TLS connection fails with
// NoClassDefFoundError (the test launcher adds them).
// A failed handshake makes New fail after the connect timeout with the
// crypto/tls error.
//
// With WithAuth, nodes get CREATOR_ALL, which grants every identity of the
// creating session: over mutual TLS that includes the client certificate's
// (ZooKeeper's x509 provider), so applications that share a certificate
// share their locks. Give each application its own certificate.
//
// # Errors
//
// Calls fail with errors that wrap locker.ErrUnavailable when the ensemble
// does not answer within the connect timeout (requests wait for a
// reconnection meanwhile) or answers with an error; with
// locker.ErrPermission when an ACL denies access (another application's
// nodes: ZooKeeper's NoAuth), which a breaker does not count; with
// locker.ErrClosed after Close; Unlock with
// locker.ErrLockLost after a loss and locker.ErrNotHeld without a hold;
// NewLocker with locker.ErrInvalidName or locker.ErrInvalidArgument.
// Contention is never an error. LockCtx returns ctx.Err() when ctx ends
// first; the raw acquisition (locker.Front.Acquire) wraps ErrUnavailable
// too when a request had been unanswered for driver.OutageAfter then. Ping
// reads the root node, within its context and the connect timeout.
//
// With no session and the last connection to each server refused, or
// closed by the server (a dead server's connection ends so), the engine
// knows it is cut off: Ping and new acquisitions fail at once with errors
// wrapping both locker.ErrUnavailable and locker.ErrRefused. go-zookeeper
// waits a second between rounds of its server list, so this lasts about a
// second after the ensemble is back. A server that is frozen is not
// refused: its calls fail at their deadline or the connect timeout.
//
// # Ensembles: riding through an election
//
// Given several servers, the engine treats a server's death, a frozen
// server and a leader election as the ensemble's business, as long as it
// keeps its quorum:
//
//   - Ride-through window (WithRideThrough): a switcher opens the
//     engine's breaker only once the engine has failed, without a success,
//     for that long, refusals of every server (locker.ErrRefused, as while
//     the ensemble elects) included. ZooKeeper's followers see a killed
//     leader's connections close and elect within a second
//     (FastLeaderElection); a frozen leader is noticed after syncLimit ×
//     tickTime (10s with ZooKeeper's sample zoo.cfg, 5 × 2000ms: raise the
//     window, or lower syncLimit, to ride that out).
//   - A server that leaves a request unanswered for a second (frozen, or
//     cut off from its leader) has its socket closed, so that the session
//     moves to the next server and the requests are sent again there:
//     go-zookeeper would otherwise keep the session on it for its receive
//     timeout, two thirds of the session timeout. Creates are protected
//     (a node found by its GUID after a reconnection is the create's), so
//     a create sent again does not make a second node.
//
// So callers wait at most the election bound — the ensemble's election
// (syncLimit × tickTime for a frozen leader), the stall timeout to leave a
// frozen server, and a second for go-zookeeper's next round of servers:
// 2s for a killed leader and 4.5s for a frozen one with the test
// ensembles (tickTime 200ms, syncLimit 10) — plus a round trip; a
// follower's death costs the session on it a reconnection.
//
// # What is not guaranteed
//
// A process that stalls (a long GC pause, a frozen VM) past the session
// timeout may act as a holder until it notices that Lost closed, while
// another owner holds the lock: protect the resource with the tokens. A
// one-shot watch that a cancelled waiter set on its predecessor stays on
// the server until that node is deleted or the session ends.
//
// # Close
//
// Close releases the holds still held, stops every goroutine the engine
// started and ends the session (see Engine.Close). An engine is not built
// over a caller's *gozk.Conn: it needs the connection's event callback and
// dialer, which are set when the connection is made.
package zk
