// Package postgres is the orthrus lock engine for PostgreSQL, over pgx v5:
// holds and waiters as rows that expire by the database's clock, fencing
// tokens from a sequence, waiters woken by LISTEN/NOTIFY; mutexes, fair
// read-write locks and FIFO semaphores, waiters ranked by weight.
//
//	pool, err := pgxpool.New(ctx, "postgres://app@db/app")
//	...
//	defer pool.Close()
//	engine, err := postgres.New(pool, postgres.WithSchema("app_locks"))
//	...
//	defer engine.Close()
//	l, err := engine.NewLocker("orders/42")
//
// The caller owns the pool (DSN, credentials, TLS through sslmode and its
// files): the engine never closes it. Close the engine first.
//
// # Rows, not advisory locks
//
// A session advisory lock belongs to a connection: in a pool it is held by
// whichever request got that connection, dies when the pool recycles it,
// has no expiry for a stalled owner and no token to fence with. A row does
// all four: a hold outlives connections, ends at its expiry when its owner
// stops renewing it, and carries a fencing token from a sequence. The
// engine uses one transaction-scoped advisory lock per name only to order
// the inserts of that name.
//
// # Tables
//
// In one schema (WithSchema, default "orthrus"), made on first use, or by
// an administrator with SchemaSQL and WithoutSchemaCreation:
//
//	<schema>.seq     a sequence: each row's place in line, and the tokens
//	<schema>.holds   a row per hold and per waiter: (fam, name, seq) keys it;
//	                 kind, owner, permits, downgrade, token, granted (a
//	                 recorded grant), expires, weight
//	<schema>.counts  a semaphore's stored permit count
//	<schema>.epochs  a switcher's epoch record per fleet
//
// An acquisition is one round trip: a batch (one implicit transaction)
// takes pg_advisory_xact_lock on the name, inserts the row with
// nextval(seq) and expires = clock_timestamp() + TTL, and reads the name's
// live rows; internal/lockrule decides, in Go, over the rows in seq order.
// The advisory lock makes seq order the commit order of a name's rows, and
// the read, a statement after the lock, sees every earlier row. A TryLock
// that is not granted deletes its row at once. A waiter re-reads only the
// rows that may count against it (those before it, downgraded readers,
// recorded grants and rows of a weight other than 1), refreshing its own
// row's expiry and taking a new token, in one statement, when a
// notification tells it that one it waits for went, at the expiry of the
// soonest of those, or every third of its TTL: a dead waiter's row
// expires too.
//
// One connection per engine LISTENs on "<schema>_locks" (taken from the
// pool and kept). A release, a withdrawn wait, a force unlock and a count
// change notify in the same statement; the engine wakes only its waiters
// whose verdict names the row that went. When the listening connection
// fails, every waiter is woken and the engine reconnects with backoff.
//
// An operator who deletes a hold's row by hand can have its owner notice at
// once, rather than at its next renewal, by notifying in the same statement
// as the engine does, with the payload "<fam>:<seq>:<name>" (fam 0 for a
// mutex, 1 for a read-write lock, 2 for a semaphore):
//
//	WITH d AS (DELETE FROM orthrus.holds WHERE fam = 0 AND name = 'orders/42' RETURNING fam, seq, name)
//	SELECT pg_notify('orthrus_locks', fam || ':' || seq || ':' || name) FROM d;
//
// A schema made by an older version gains the weight column (ALTER TABLE
// ... ADD COLUMN IF NOT EXISTS, in SchemaSQL) on the engine's first
// request, or from an administrator's SchemaSQL with WithoutSchemaCreation.
// Upgrade every process before any uses a weight: an older one ignores
// weights and does not wait for a pending arrival.
//
// A row whose expires has passed counts as absent in every statement; a
// reaper deletes rows expired for over a minute, every minute, a thousand
// at a time, until Close.
//
// # Guarantees
//
//   - Exclusion by PostgreSQL's transactions on one primary. Expiry is the
//     database's clock (clock_timestamp()), never the client's.
//   - Tokens come from one sequence: a row's is drawn at its insert and
//     again at each re-read, so that a lighter waiter granted after a
//     heavier one that came later still gets a larger token. They grow
//     with every grant of a name that excludes the grant before it, are
//     unique in the schema, survive restarts (a sequence may skip ahead after a
//     crash, never back), and compare only within one database and schema.
//     A downgraded read keeps its writer's token.
//   - FIFO per name within a weight; read-write locks are fair, downgrades allowed,
//     upgrades refused; semaphores are FIFO, their count stored on first
//     acquisition (a Semaphore opened with another count fails with
//     ErrPermitsMismatch), changed by SetPermits, which keeps the holds
//     already granted. The grant order is internal/lockrule's.
//   - Holds are renewed every TTL/3, up to 1024 in one UPDATE; a hold whose
//     row is gone or expired is lost (Lost closes) at its next renewal, or
//     at once when a notification says its row went (ForceUnlock, or a
//     DELETE that notifies as above). With a lock delay, rows live TTL +
//     delay.
//   - Cancellation: a cancelled wait returns at once, and its row is
//     deleted on the engine's worker (retried while the database does not
//     answer, within the release timeout) or expires by its TTL. A wait
//     cancelled while its insert may still run on the server (its
//     connection dropped) first ends that insert's backend and waits for
//     it to exit (pg_terminate_backend, PostgreSQL 14 and later; a role
//     may end its own backends), so that the row cannot be committed
//     after the delete.
//   - Not guaranteed across a failover to a replica: asynchronous
//     replication may lose recent rows, and with them holds.
//
// # Weights
//
// locker.WithWeight ranks waiters by internal/lockrule: heaviest first,
// FIFO within a weight, a grant never taken back; TryLock ranks as weight
// 1. The rule needs the grants a queue has made, and with weights these
// no longer follow from the queue (a heavier row may rank ahead of an
// older one), while nothing is written at a grant. So a heavy arrival
// (weight above 1, the only kind of row that may rank ahead of older
// ones, so the only one that could contradict a grant) records them.
// It inserts its row pending (weight negated), as a weight-1 row is
// inserted; then, in one transaction under the name's advisory lock, it
// reads the queue, marks granted the rows the rule grants there (marks
// held, pending rows left out), settles its row (weight made positive,
// with a notification) and reads its verdict. Everyone decides with the
// marks as held, and no row concludes a grant the rule has not recorded
// while another row is pending: it waits for that row to settle or go.
//
// Why that is exact: a row E that concluded it is granted read a queue
// without W's row, so before W's insert committed, so before W's look
// (had E seen W pending it would have waited; settled, it would have read
// W's marks). Between the two reads rows only went (a going never takes a
// grant away), weight-1 rows came behind E, pending rows came (left out
// by W's look; E saw none), and heavy rows settled, marking E by the same
// argument. So W's look grants E, and W marks it. A row not marked was
// waiting when W looked, and W may pass it.
//
// Cost: a weight-1 acquisition and a re-read are the one statement
// above, with the weight as one more column; nothing waits for a lock
// that a weight adds. A heavy acquisition takes three round trips (the
// insert, the look, then marks and settlement), holding the name's
// advisory lock over the second answer's way back, so that the name's
// arrivals wait that long, and its waiters conclude nothing for the
// three. A heavy arrival that dies pending holds the waiters' grants until
// its row expires (its TTL). It never retries, but for a transaction
// PostgreSQL aborted as a deadlock's victim (a renewal locks the rows it
// marks in its own order), which it runs again within the caller's
// budget, as SetPermits does. A marked row stays marked
// until it goes. Nothing ages a waiter: a steady stream of heavier
// waiters starves lighter ones.
//
// # Options
//
//	WithSchema             the schema of the tables         "orthrus"
//	WithRequestTimeout     bound of every round trip        2s
//	WithoutSchemaCreation  never CREATE; see SchemaSQL      creates what is missing
//	WithName, WithLogger, WithObserver                      "postgres", slog.Default(), none
//
// MinTTL is 100ms: rows keep any TTL; a shorter one would not outlive the
// round trips that renew it.
//
// # Roles
//
// A role limited to its own schema (CREATE SCHEMA app AUTHORIZATION app)
// needs nothing else; with WithoutSchemaCreation an administrator runs
// SchemaSQL and grants USAGE on the schema and its sequence and SELECT,
// INSERT, UPDATE, DELETE on its tables.
//
// # Errors
//
// Every round trip is bounded by WithRequestTimeout. Failures wrap
// locker.ErrUnavailable (and locker.ErrRefused when the server refused or
// dropped the connection, or said it is shutting down); a refused role, or
// missing tables with WithoutSchemaCreation, wraps locker.ErrPermission; a
// lost hold locker.ErrLockLost; a closed engine locker.ErrClosed. Contention
// is never an error.
package postgres
