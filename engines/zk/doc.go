// Package zk is the ZooKeeper lock engine of orthrus, over
// github.com/go-zookeeper/zk (imported as gozk).
//
//	e, err := zk.New([]string{"zk1:2181", "zk2:2181", "zk3:2181"},
//		zk.WithPrefix("/myapp/locks"), zk.WithSessionTimeout(10*time.Second))
//	if err != nil { ... }            // errors.Is(err, locker.ErrUnavailable): no session in time
//	defer e.Close()
//	l, err := e.NewLocker("order/42")
//
// The engine owns one connection and its session (it is not built over a
// caller's *gozk.Conn: it needs the connection's event callback and
// dialer); Close releases the holds still held and ends the session.
//
// # Nodes
//
// Under the prefix (WithPrefix), every name has a parent node, created as
// a container node (ZooKeeper 3.5.3 or later) by the first acquisition
// that finds it missing:
//
//	<prefix>/<escaped name>        a mutex
//	<prefix>/%rw/<escaped name>    a read-write lock
//	<prefix>/%sem/<escaped name>   a semaphore; its child "permits" stores
//	                               the permit count, in decimal
//	<prefix>/%epochs/<fleet>       a switcher's epoch record
//
// An acquisition creates an ephemeral sequential node
// "_c_<guid><marker><sequence>" under the parent, with the owner ID as
// data. The marker says what it holds: "-lock-" a mutex, "-r-" a reader,
// "-w-" a writer, "-d<token>-" a reader taken while its owner held the
// write side (a downgrade, with the write hold's token), "-p<n>-" n
// permits. The guid finds the node after a create whose reply was lost
// (Curator's protected mode), so that no orphan stays in the queue. A
// hold with a lock delay keeps a persistent marker "<parent>/delay" beside
// its node (delay.go).
//
// Names are any string driver.ValidateName accepts: '/', '%', the dots of
// "." and "..", and the characters ZooKeeper rejects are percent-encoded
// byte by byte, so two names never share a node, and no name collides
// with %rw, %sem or %epochs.
//
// Once the engine's last node under a parent has been gone for
// WithParentLinger, it deletes the parent, only if no process used it
// since; the server's container reaper is the backstop.
//
// # Guarantees
//
// One listing of the parent decides a grant, by the lock family's rule
// (internal/lockrule); a waiter watches only the nodes that block it (a
// mutex's or a writer's: the node just before its own), so a release wakes
// one waiter, and waiters of one weight are served in the order they
// queued (see "Weights" for the others). Readers do
// not pass a waiting writer; a downgrade holds at once; taking the write
// side while holding the read side fails with locker.ErrUpgrade. A
// semaphore grants in queue order while the permits fit the stored count:
// a Semaphore opened with another count than the stored one fails its
// first acquisition with locker.ErrPermitsMismatch; SetPermits changes the
// count and keeps the holds granted. Uncontended, Lock and Unlock make the
// three requests of go-zookeeper's lock recipe (create, list, delete). A
// cancelled wait returns at once; its node is deleted in the background,
// or goes with the session.
//
// Liveness is the session: ZooKeeper keeps no per-hold TTL, and no
// renewal traffic is sent. A dead or cut-off process keeps its holds for
// the session timeout (WithSessionTimeout, clamped by the server);
// locker.WithTTL does not change it. locker.WithLease(d) is honoured: the
// node is deleted when the lease ends. A TTL or lease below MinTTL is
// refused. Lost closes when the session expires; when the engine,
// disconnected, has not heard from the ensemble for the session timeout
// (the server may have granted the lock to another owner by then); and
// when someone else deletes the hold's node (cause observe.LostGone), which
// a watch on the node reports, set 10ms after the grant (a hold released
// sooner does without it; a deletion before it is found by the watch's
// read). A shorter disconnection keeps every hold.
//
// A lock delay (locker.WithLockDelay) is kept by the delay marker: a hold
// that ended without Unlock leaves it behind, and the next holder with a
// delay waits the delay, by the server's clock, before it takes the name
// (TryLock returns false meanwhile). Lockers without a delay ignore the
// marker: give every Locker of a name the same delay.
//
// A hold's fencing token is its node's czxid (a downgraded reader's, its
// write hold's), or, in a queue with weights, a newer zxid (see
// "Weights"). zxids increase over the whole history of an ensemble, so
// tokens increase with every grant of a name; they compare only with
// tokens of the same ensemble.
//
// With WithAuth, every node the engine creates, namespace included, gets
// CREATOR_ALL: over mutual TLS that includes the client certificate's
// identity, so applications that share a certificate share their locks.
//
// # Weights
//
// locker.WithWeight ranks the waiters of a mutex and of a read-write lock:
// the heaviest first, in queue order within a weight; a holder keeps its
// hold, TryLock ranks as weight 1, and nothing ages a waiter, so a steady
// stream of heavier waiters starves lighter ones. A semaphore refuses a
// weight above 1 with an error wrapping errors.ErrUnsupported: SetPermits
// keeps holds that the queue and the count no longer show, and a heavy
// arrival could not tell them from waiters without reading every node.
//
// A waiter of weight 1 queues as without weights, and nothing is written
// at a grant. Only a heavier node may rank ahead of nodes older than it,
// so only a heavy arrival could contradict a grant already made. It first
// looks at the queue, then creates its node, "-lock-h<w>-" (or "-w-h<w>-",
// "-r-h<w>-"), with data "orthrus-w1 <next> <parent czxid> <x or ->
// <sequence>...", a newline and the owner ID: the sequences of the nodes
// the rule granted at the look, and "x" when one of them excludes every
// other (a mutex's holder, a writer). Every look at a queue with heavy
// nodes counts the nodes they record as granted. With "x", the create's
// transaction checks that those holders still exist, so nothing else was
// granted in between, and the node is valid whatever came meanwhile.
// Otherwise it checks that every node of the look still exists, and
// ZooKeeper numbers a parent's sequential children by the creates under
// it, so the node's sequence is the <next> its look predicted exactly when
// nothing came or went in between: then it is valid. An invalid node is
// ignored by everyone and deleted by its owner, which looks and creates
// again, within the caller's context.
//
// Why that is enough: a node that concluded it holds did so on a look at
// or before the heavy node's, or it would have seen the heavy node and its
// record; since then, departures never take a grant away (the rule is
// monotone in them), weight-1 arrivals rank behind it, and heavy arrivals
// record it. So every node granted when a heavy node arrives is in its
// record, and a node not in it was waiting, and may be passed.
//
// Tokens: a heavy node granted before an older node has a higher czxid,
// so that one, once granted, would hold with a lower token than the
// holder before it. Every create under a parent writes the parent in the
// same transaction (the delay marker's too), and a heavy arrival writes it
// once more: the parent's data version less its creates ((cversion +
// children) / 2) counts those marks, and a listing's stat carries it.
// Under a parent with a mark, a grant's token is the listing's pzxid, the
// zxid of the children's last change, rather than its node's czxid. Why
// that is enough: the holder before it was granted on a listing that had
// its node (or at its create), so with a token below that node's delete;
// the listing that grants the next one no longer has it, so its pzxid is
// at or above that delete. Nothing is written at a grant. Readers granted
// on the same listing may share a token. A downgraded reader keeps its
// write hold's token, and its node names the writer's czxid. A queue that
// never had a heavy node keeps czxids, as older versions do; nodes that
// other clients create under a lock's parent without the parent's write
// (go-zookeeper's own lock recipe) would hide marks: do not mix them with
// weights. Inspect shows czxids.
//
// What weights cost: a heavy arrival sends a look before its create, one
// more round trip, and reads the records of heavy nodes it has not read
// yet (and, when a downgrade is queued, the writers' nodes); behind a
// holder that leaves within that round trip, or with no exclusive holder
// on a queue that changes that fast, it tries again. A look at a queue
// holding heavy nodes reads each heavy node once per process; the
// hand-off itself, a delete and the woken waiter's look, is unchanged:
// among four owners of weights 1, 3, 2 and 10, a hand-off's p50 is 1.12x
// that among four of weight 1, with 2.3 creates per heavy Lock
// (BenchmarkHandoffWeighted, 7 rounds).
// Every process that takes a name with a weight must run a version that
// knows weights: an older one reads a heavy node as a weight-1 node (a
// mutex's) or skips it (a read-write lock's), and may hold with it.
// TestSequenceCountsCreates checks the numbering on the server the tests
// run (ZooKeeper 3.8); a server that numbers otherwise fails heavy
// acquisitions with errors.ErrUnsupported.
//
// # Errors
//
// Calls fail with errors wrapping locker.ErrUnavailable when the ensemble
// does not answer within the connect timeout (requests wait for a
// reconnection meanwhile), and wrapping locker.ErrRefused as well, at
// once, when the last connection to each server was refused; with
// locker.ErrPermission when an ACL denies access; with locker.ErrClosed
// after Close. Contention is never an error.
//
// # Ensembles
//
// Given several servers, a server's death, a frozen server and a leader
// election are the ensemble's business while it keeps its quorum: a
// server that leaves a request unanswered for a second has its socket
// closed, so that the session moves on and the requests are sent again,
// and a switcher opens the engine's breaker only after WithRideThrough.
// With the test ensembles (tickTime 200ms, syncLimit 10) callers wait about
// 2s through a killed leader and 4.5s through a frozen one; a frozen
// leader is noticed after syncLimit × tickTime.
//
// # TLS
//
// WithTLS connects to secureClientPort, which ZooKeeper serves only with
// serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory.
// Debian's zookeeper 3.8.0 package leaves netty-codec out of the
// classpath: append /usr/share/java/netty-codec.jar, netty-resolver.jar
// and netty-transport-native-unix-common.jar to CLASSPATH in
// /etc/zookeeper/conf/environment, or every TLS connection fails with
// NoClassDefFoundError.
//
// # What is not guaranteed
//
// A process that stalls (a long GC pause, a frozen VM) past the session
// timeout may act as a holder until it notices that Lost closed, while
// another owner holds the lock: protect the resource with the tokens. A
// one-shot watch that a cancelled waiter set on its predecessor stays on
// the server until that node is deleted or the session ends.
package zk
