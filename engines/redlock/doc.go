// Package redlock is the Redlock engine: one lock over N independent Redis
// masters (no replication between them), granted when a majority of them
// granted it, with fencing tokens that increase across grants although no
// node is authoritative.
//
//	e, err := redlock.New([]goredis.UniversalClient{a, b, c, d, e})
//	defer e.Close()
//	l, _ := e.NewLocker("orders/42")
//
// New wants at least 3 nodes, each a *redis.Client of a different server;
// an even count works but tolerates no more failures than one node fewer
// (New logs a warning). The engine never closes the clients.
//
// # Algorithm
//
// Acquire sends the single-node engine's acquire script (engines/redis,
// lua/fence.lua and lua/acquire.lua: SET NX PX "<token>:<owner>" and the
// name's counter bumped) to every node at once, each request bounded by the
// node timeout. The hold is granted when a majority granted it and its
// validity — TTL − the time taken − the clock drift allowance (1% of the
// TTL + 2ms) — is still positive. Otherwise the attempt deletes what it got
// on every node that granted it, and, with wait, tries again: after a
// release message, or the soonest expiry the nodes reported, or, when the
// attempt got some nodes but not a majority (a split between contenders),
// after a random backoff whose window starts at twice the attempt's
// duration and doubles with each split in a row, up to four node timeouts
// (an attempt one node short of a majority draws from the window's first
// half, the others from its second). A node's grant that comes after the
// attempt was decided is deleted by the engine's worker that receives it.
// Release deletes the hold on every node that granted it (comparing the
// owner and token) and publishes a wake-up there; it returns once a
// majority has deleted it, the other nodes' requests going on in the
// background (a node that does not get its request keeps its copy until its
// TTL). Renewal extends the hold on the nodes that granted it; it is
// renewed when a majority renewed it, and lost (Lost closes, Unlock returns
// ErrLockLost) when so many nodes answered that it is gone that a majority
// no longer can, or when no renewal reached a majority within the TTL.
//
// Waiters do not poll: each engine keeps one pub/sub connection per node,
// a name's release channel is subscribed on every node while the process
// has waiters for it, and a waiter first waits for a majority of the nodes
// to confirm its subscription (any majority shares a node with the
// holder's), then tries again, then waits for its turn. A message from any
// node gives the turn to one waiter of the process (the one that had it
// least recently); messages that come while it tries give the next turn
// once it waits again, and a waiter that leaves with the turn without the
// hold hands it on. So a release sets one attempt per process going,
// rather than every waiter at once, which split the nodes between them
// over and over on a loaded host. A cancelled wait unsubscribes and leaves
// nothing on any node.
//
// # Failures
//
// A minority of nodes down or frozen does not stop the engine: the
// acquisitions, releases and renewals go on with the majority, a frozen
// node costing each of them up to the node timeout. With a majority down
// (refusing connections) every call fails at once with an error wrapping
// locker.ErrUnavailable and locker.ErrRefused; with a majority silent, an
// acquisition tries again within its caller's budget, starting no attempt
// that could not end within 2s (driver.DefaultRequestTimeout) of the first
// silent one's start, and then fails with locker.ErrUnavailable,
// so a wait shorter than driver.OutageAfter only runs out of time.
//
// # Fencing tokens
//
// A grant's token is the highest counter among the majority that granted
// it (each node's counter, bumped by the grant, starts from the node's
// clock in ms), and before the grant returns it is written back (counter =
// max(counter, token)) to at least a majority (phase 2: one more round
// trip, to the granting nodes whose counter was lower, only when they
// differ). Any later majority shares a node with that one, so:
//
//   - Guaranteed: a grant that begins after an earlier grant of the name
//     returned draws a higher token, as long as one node shared by the
//     earlier write-back majority and the later granting majority kept its
//     data, or, having lost it, reads a clock (ms) past the earlier token.
//     Tokens start from the clock and rise by one per grant, so they stay
//     behind the clock of a node restarted empty while the name is granted
//     less than 1,000 times a second on average; that is the clock floor.
//     TestNoTokenInversion checks 10,000 grants while nodes restart with
//     and without their data.
//   - Not guaranteed: tokens of grants that overlap in time (the three
//     cases below) are ordered only in the order they finished; a token
//     says which of two holders is newer, not that there is one holder.
//     Tokens are not consecutive. A node restarted without its data whose
//     clock is behind (stepped back, or a name granted faster than once
//     per ms) may, if it is the only shared node, give a lower token: keep
//     the nodes' clocks monotonic (NTP slewing, not stepping).
//
// # What Redlock does not guarantee
//
// Mutual exclusion holds while the nodes keep their keys for their TTL.
// Three cases break it, as the Redlock debate showed, and the tests show
// each with a fenced resource (one that accepts a write only with a token
// at least the highest it saw), which refuses the older holder:
//
//   - A node that held the lock restarts without its data (no persistence,
//     or an fsync lost): another client may take a majority with it while
//     the first still holds the others. Restart such a node no sooner than
//     the longest TTL after it went down: the first holder's renewals then
//     fail to reach a majority and it loses the hold (Lost closes) before
//     the node is back.
//   - A node's clock jumps forward and its copy expires early: the same.
//   - The holder pauses (GC, SIGSTOP, a VM migration) past its TTL: its
//     keys expire and another client takes the name; when the holder
//     resumes, its Lost is already closed or closes at once, but a write
//     it was making is only stopped by the token.
//
// # Other calls
//
// Inspect reports the owner most answering nodes hold, and the waiters as
// the most subscribers a node counts on the release channel; ForceUnlock
// deletes the hold on every node whoever owns it. Ping wants a majority.
// The read-write lock and the semaphore are refused with an error wrapping
// errors.ErrUnsupported: their grant rules need one authoritative queue,
// which a quorum of independent nodes does not have. The engine keeps no
// switcher epoch record.
//
// Keys are the single-node engine's ("<prefix>:{<name>}", its counter
// "...:fence", its channel "...:wake"): do not share a node between the two
// engines under one prefix.
//
// Options: WithName (default "redlock"), WithPrefix (default "orthrus"),
// WithNodeTimeout (default DefaultNodeTimeout, 100ms), WithLogger (default
// slog.Default()), WithObserver (default none). The shortest TTL is
// redis.MinTTL + twice the node timeout (300ms by default).
package redlock
