// Package idem is the idempotency gate of orthrus: it runs an operation once
// across a fleet, however often it is submitted (a client retry, a
// redelivered message, a double click), on Redis, etcd or ZooKeeper, and
// through an engine switch.
//
//	tk, dup, err := gate.Begin(ctx, order)        // before the operation
//	switch {
//	case err != nil: // the store is unavailable and the policy is FailClosed, or bad input
//	case dup != nil: // a duplicate: dup.State is Running or Succeeded (with dup.Result)
//	default:
//		res, opErr := pay(order)
//		err = tk.Done(context.WithoutCancel(ctx), opErr) // or tk.Succeed(ctx, res)
//	}
//
// # How it works
//
// The operation is described by its content: an order ID, or a map or
// struct of the fields that make it unique. Its ID is HMAC-SHA-256 of the
// content's canonical form (Identify), keyed with the application key, so
// applications never collide and nobody computes an ID without the key.
// Begin creates the record of the ID if there is none, with a short expiry
// (WithExpiry) and a value holding a random token that identifies this
// attempt; if a record is there, the operation is a duplicate and Begin
// says whether its attempt is still running or has succeeded. Done reports
// the outcome: success rewrites the record as succeeded, with an optional
// small result, for the long retention (WithRetention); failure deletes it
// so that a retry can run at once. Both happen only if the record still
// holds this attempt's value: an attempt that outlived its expiry never
// extends or deletes the record of the attempt that took over (Done then
// returns ErrNotOwner). An attempt whose process dies frees the ID when its
// expiry passes.
//
// The algorithm is written once, against the Store interface; each engine
// has a small adapter over the client the caller already has:
//
//   - RedisStore (go-redis UniversalClient: single node, Sentinel,
//     Cluster): Begin is one SET key value PX expiry NX (a duplicate then
//     reads the record with a GET); Done is one Lua script that compares
//     the value and then rewrites or deletes.
//   - EtcdStore (clientv3): Begin and Done are one transaction each,
//     comparing the key's revision; expiry is a lease, shared by the
//     records that begin within the same stretch (see EtcdStore).
//   - ZKStore (go-zookeeper): ZooKeeper cannot extend a node's expiry, so
//     the store keeps the TTL in the node and expires records lazily by
//     the server's clock, with TTL nodes for garbage collection; it needs
//     ZooKeeper 3.5.3+ with extendedTypesEnabled, or WithoutTTLNodes. See
//     ZKStore.
//
// # What is guaranteed, and what is not
//
// On one store, at most one attempt of an ID holds a live record at a
// time, across goroutines, processes and hosts, and a Done acts only on its
// own attempt's record. That is at-most-once start within the expiry, not
// exactly-once execution:
//
//   - An attempt that runs longer than the expiry loses its record, and a
//     retry can then run beside it. Choose an expiry longer than the
//     operation can take.
//   - Redis replicates asynchronously: a failover can lose records written
//     just before it.
//   - With FailOpen, an unavailable store lets every submission run.
//   - Records live on one engine; see the next section.
//
// Expiries are the servers' clocks (Redis key TTLs, etcd leases, ZooKeeper
// mtimes); the processes' clocks only fill Record.Begun. etcd rounds an
// expiry up to whole seconds, and to the cluster's minimum lease TTL.
//
// # Switching engines
//
// NewSwitched puts a gate over several stores, one per engine, and asks a
// function (a switcher's Current method) which engine is current at every
// Begin. A ticket is pinned to the store that issued it: its Done goes
// there after any number of switches. Records are not migrated, so after a
// switch the new engine does not see the records of the old one: an
// operation that ran or is running on the old engine can run again on the
// new one, for as long as its record would have refused it (the expiry for
// a running attempt, the retention for a succeeded one). WithCheckPrevious
// closes that window: after a switch, Begin also looks the ID up on the
// previous engine's store (bounded by its own timeout) and reports a
// duplicate found there, for the retention and as long as that store
// answers; the first lookup that fails stops the checks until the next
// switch (or for 5s, whichever ends first), so a dead engine costs one
// timeout every few seconds, not one per Begin. Processes
// that switch at different moments (without a shared switcher source) can
// still both run an operation, one on each engine.
//
// FromSwitcher builds the switched gate from a switcher's own engines
// (their clients, nothing dialled again), so it starts with engines down
// as config.Open does, checks the previous store by default, and never
// waits for a store whose engine's breaker is open.
//
// # Through an outage
//
// A ticket whose store stops answering keeps its store: its Done tries
// there once (or not at all when the store is known to be down) and then
// hands the outcome to the gate, which writes it in the background when
// the store answers again (WithPending), until the record's own expiry,
// after which the store has freed the operation anyway; Done returns an
// error wrapping ErrPending. Meanwhile the gate remembers the attempts of
// its own process, running or with their outcome pending: a duplicate
// reaching the same process gets Running or the pending result without a
// round trip, whichever store it would have gone to. A Begin whose store
// fails while the switcher moves goes again to the new current store,
// within the caller's context. With WithCheckPrevious (on with
// FromSwitcher), the first Begin of a process that sees a switch also has
// the gate claim that process's running attempts on the new store (their
// running record written there too, with the same attempt token and
// expiry; their outcome then goes to both stores) and copy its successes
// of the last expiry there, in the background, so that duplicates reaching
// other processes get Running or the result on the new store even when
// the previous one does not answer. What is not copied (an operation
// recorded on the old store by a process that has not noticed the switch
// yet, or a success older than the expiry) can still run again there:
// that is the window a switch away from a dead store opens. A Begin whose
// create timed out leaves a clean-up behind: the store may apply the
// write late, and that record, which nobody owns, is deleted once the
// store answers rather than refusing the operation until its expiry.
//
// # When the store is unavailable
//
// Every round trip is bounded by the caller's context and the request
// timeout (WithRequestTimeout); a store that does not answer in time is
// unavailable. The policy (WithPolicy) then says what Begin does:
// FailClosed (the default) returns an error wrapping
// locker.ErrUnavailable, FailOpen returns an unguarded Ticket (Unguarded
// is true; its Done writes nothing). The start and the end of an outage
// are logged with slog, and Stats counts what Begin returned. For the Redis
// store, set ContextTimeoutEnabled on the client, so that a paused server
// fails a call at the deadline rather than at the client's read timeout.
//
// # Errors
//
// locker.ErrUnavailable (the store failed or timed out), locker.ErrClosed
// (the store's client was closed: an error whatever the policy),
// ErrNotOwner (Done found another attempt's record, or none), ErrDone (a
// ticket reported twice), locker.ErrInvalidArgument (a bad option or
// argument, naming it), and ctx.Err() when the caller's context ends
// first. A duplicate is not an error. Errors name the call made: "idem:
// Done ..." for a Done, even one that records a success.
//
// # Operations
//
// Gate.Lookup and Gate.Forget read and delete a record by ID; lockctl idem
// lookup and lockctl idem delete use them. Package idemhttp is net/http
// middleware that honours the Idempotency-Key request header.
//
// Options beyond the basics: WithExpiryFromDeadline (a running record
// expires at the caller's deadline when that comes first), WithLocalCache
// (succeeded records replayed without a round trip), WithDisabled (no
// store I/O, for tests), WithObserver (package telemetry's metrics and
// spans).
//
// A Gate starts a goroutine only to write pending outcomes, with the
// first one; Close stops it (and closes the ZooKeeper stores FromSwitcher
// made). Close a gate when done with it. ZKStore runs each request on a
// goroutine, since go-zookeeper's calls take no context; its Close waits
// for them. No store closes the client it was given.
package idem
