// Package postgres is the orthrus lock engine for PostgreSQL, over pgx v5:
// holds and waiters as rows that expire by the database's clock, fencing
// tokens from a sequence, waiters woken by LISTEN/NOTIFY; mutexes, fair
// read-write locks and FIFO semaphores.
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
// stops renewing it, and carries its place in line as a fencing token. The
// engine uses one transaction-scoped advisory lock per name only to order
// the inserts of that name.
//
// # Tables
//
// In one schema (WithSchema, default "orthrus"), made on first use, or by
// an administrator with SchemaSQL and WithoutSchemaCreation:
//
//	<schema>.seq     a sequence: each row's place in line, and its token
//	<schema>.holds   a row per hold and per waiter: (fam, name, seq) keys it;
//	                 kind, owner, permits, downgrade, token, expires
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
// rows before it (and downgraded readers), refreshing its own row's
// expiry, when a notification tells it that one it waits for went, at the
// expiry of the soonest of those, or every third of its TTL: a dead
// waiter's row expires too.
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
// A row whose expires has passed counts as absent in every statement; a
// reaper deletes rows expired for over a minute, every minute, a thousand
// at a time, until Close.
//
// # Guarantees
//
//   - Exclusion by PostgreSQL's transactions on one primary. Expiry is the
//     database's clock (clock_timestamp()), never the client's.
//   - Tokens come from one sequence: they grow with every grant of any name
//     in the schema, survive restarts (a sequence may skip ahead after a
//     crash, never back), and compare only within one database and schema.
//     A downgraded read keeps its writer's token.
//   - FIFO per name; read-write locks are fair, downgrades allowed,
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
//     answer, within the release timeout) or expires by its TTL.
//   - Not guaranteed across a failover to a replica: asynchronous
//     replication may lose recent rows, and with them holds.
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
