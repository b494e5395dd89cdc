package postgres

import (
	"strings"

	"github.com/jackc/pgx/v5"
)

// SchemaSQL returns the statements that make the engine's tables in
// schema, for an administrator to run where the engine's role may not
// create them (WithoutSchemaCreation). The role then needs USAGE on the
// schema, SELECT, INSERT, UPDATE and DELETE on its tables, and USAGE on
// its sequence:
//
//	GRANT USAGE ON SCHEMA orthrus TO app;
//	GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA orthrus TO app;
//	GRANT USAGE ON ALL SEQUENCES IN SCHEMA orthrus TO app;
func SchemaSQL(schema string) string {
	s := pgx.Identifier{schema}.Sanitize()
	return strings.NewReplacer("S;", s+";", "S.", s+".").Replace(`CREATE SCHEMA IF NOT EXISTS S;
CREATE SEQUENCE IF NOT EXISTS S.seq;
CREATE TABLE IF NOT EXISTS S.holds (
	fam smallint NOT NULL,
	name text NOT NULL,
	seq bigint NOT NULL,
	kind smallint NOT NULL,
	owner text NOT NULL,
	nonce bigint NOT NULL,
	permits integer NOT NULL,
	downgrade boolean NOT NULL,
	token bigint NOT NULL,
	granted boolean NOT NULL DEFAULT false,
	expires timestamptz NOT NULL,
	weight smallint NOT NULL DEFAULT 1,
	PRIMARY KEY (fam, name, seq)
);
ALTER TABLE S.holds ADD COLUMN IF NOT EXISTS weight smallint NOT NULL DEFAULT 1;
CREATE UNIQUE INDEX IF NOT EXISTS holds_seq ON S.holds (seq);
CREATE TABLE IF NOT EXISTS S.counts (name text PRIMARY KEY, permits integer NOT NULL);
CREATE TABLE IF NOT EXISTS S.epochs (fleet text PRIMARY KEY, epoch bigint NOT NULL);
`)
}

// Families: a name's mutex, read-write lock and semaphore are independent
// locks, told apart by the holds table's fam column.
const (
	famMutex  = 0
	famRW     = 1
	famPermit = 2
)

// statements are the engine's SQL with its schema filled in.
type statements struct {
	queueSQL
	channel, exists, release, withdraw, endBackend, renew, notify, reap, countInit, countGet string
	inspect, force, setPermits, epochGet, epochInit, epochSwap, missing                      string
}

// queueSQL are the statements that join a name's queue and read it.
type queueSQL struct {
	lockName, look, mark, settle, enqueue, recheck string
}

// row is what the engine reads of a hold or waiter: granted marks a row
// whose grant was recorded, by SetPermits before it lowered the count or
// by a heavier arrival that may rank ahead of it (a grant is never taken
// back); weight ranks a waiting row; token proves a downgrade's writer
// held; left is the time to its expiry in seconds, by the database's
// clock; mine marks the caller's own row; count is the semaphore's stored
// count (NULL elsewhere).
const rowCols = `seq, kind, permits, downgrade, granted, weight, token, extract(epoch FROM expires - clock_timestamp())::float8`

// newStatements fills in schema, a name CheckSchema accepts: quoted as an
// identifier, and within literals as it is (it holds no quote).
func newStatements(schema string) statements {
	quoted := pgx.Identifier{schema}.Sanitize()
	q := func(s string) string {
		return strings.NewReplacer("S.", quoted+".", "CHAN", schema+"_locks", "ROW", rowCols).Replace(s)
	}
	return statements{
		queueSQL: queueStatements(q),
		channel:  schema + "_locks",
		exists: q(`SELECT to_regnamespace('` + quoted + `') IS NOT NULL, to_regclass('S.holds') IS NOT NULL AND to_regclass('S.counts') IS NOT NULL AND to_regclass('S.epochs') IS NOT NULL AND to_regclass('S.seq') IS NOT NULL AND to_regclass('S.holds_seq') IS NOT NULL
	AND EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('S.holds') AND attname = 'weight' AND NOT attisdropped)`),
		release: q(`WITH d AS (DELETE FROM S.holds WHERE fam = $1 AND name = $2 AND seq = $3 AND owner = $4 RETURNING expires)
SELECT pg_notify('CHAN', $1 || ':' || $3 || ':' || $2), expires > clock_timestamp() FROM d`),
		withdraw: q(`WITH d AS (DELETE FROM S.holds WHERE fam = $1 AND name = $2 AND nonce = $3 RETURNING seq)
SELECT pg_notify('CHAN', $1 || ':' || seq || ':' || $2) FROM d`),
		// Ends backend $1 and waits up to $2 ms for it to exit (PostgreSQL
		// 14 and later): true once it is gone. Only a client backend whose
		// role's rights the engine's role has (its own backends), never the
		// asking one: should the system have reused the PID by then, only
		// a session of the same role could be ended by mistake.
		endBackend: `SELECT coalesce(bool_and(pg_terminate_backend(pid, $2)), true) FROM pg_stat_activity
WHERE pid = $1 AND pid <> pg_backend_pid() AND backend_type = 'client backend' AND pg_has_role(usesysid, 'USAGE')`,
		// By seq alone (unique, indexed by holds_seq), at one life, and
		// answering only the seqs it did not find: a renewal of 1024 rows
		// sends no names and reads nothing back when all is well.
		renew: q(`WITH r AS (UPDATE S.holds h SET expires = clock_timestamp() + make_interval(secs => $2)
	FROM unnest($1::bigint[]) AS u(seq)
	WHERE h.seq = u.seq AND h.expires > clock_timestamp()
	RETURNING h.seq)
SELECT unnest($1::bigint[]) EXCEPT SELECT seq FROM r`),
		notify: q(`SELECT pg_notify('CHAN', $1)`),
		reap: q(`DELETE FROM S.holds WHERE ctid = ANY(ARRAY(
	SELECT ctid FROM S.holds WHERE expires < clock_timestamp() - make_interval(secs => $1) LIMIT 1000))`),
		countGet: q(`SELECT permits FROM S.counts WHERE name = $1`),
		missing: q(`SELECT u.seq FROM unnest($1::bigint[]) AS u(seq)
WHERE NOT EXISTS (SELECT 1 FROM S.holds h WHERE h.seq = u.seq)`),
		countInit: q(`INSERT INTO S.counts (name, permits) VALUES ($1, $2) ON CONFLICT DO NOTHING`),
		inspect: q(`SELECT seq, kind, owner, permits, token, extract(epoch FROM expires - clock_timestamp())::float8, downgrade, granted, weight
FROM S.holds WHERE fam = $1 AND name = $2 AND expires > clock_timestamp() ORDER BY seq`),
		force: q(`WITH d AS (DELETE FROM S.holds WHERE fam = $1 AND name = $2 AND seq = ANY($3::bigint[]) RETURNING seq)
SELECT pg_notify('CHAN', $1 || ':' || seq || ':' || $2) FROM d`),
		// Under the name's advisory lock, after the rule marked the rows
		// it grants at the old count.
		setPermits: q(`WITH g AS (UPDATE S.holds SET granted = true WHERE fam = 2 AND name = $1 AND seq = ANY($3::bigint[])),
c AS (INSERT INTO S.counts (name, permits) VALUES ($1, $2)
	ON CONFLICT (name) DO UPDATE SET permits = excluded.permits RETURNING 1)
SELECT pg_notify('CHAN', '2:0:' || $1) FROM c`),
		epochGet:  q(`SELECT epoch FROM S.epochs WHERE fleet = $1`),
		epochInit: q(`INSERT INTO S.epochs (fleet, epoch) VALUES ($1, $2) ON CONFLICT DO NOTHING`),
		epochSwap: q(`UPDATE S.epochs SET epoch = $3 WHERE fleet = $1 AND epoch = $2`),
	}
}

// countSQL is the semaphore's stored count, in a statement whose $2 is the
// name.
const countSQL = `(SELECT permits FROM S.counts WHERE name = $2)`

// queueStatements are those that join a queue and read it.
func queueStatements(q func(string) string) queueSQL {
	return queueSQL{
		// A name's queue changes under this lock, held to the end of the
		// transaction that takes it (lockKey names it).
		lockName: `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`,
		// A heavy arrival's look at the queue it joined, pending (weight
		// below 0), under the lock (see the package doc on weights).
		look: q(`SELECT ROW, false, ` + countSQL + ` FROM S.holds WHERE fam = $1 AND name = $2 AND expires > clock_timestamp()`),
		// It records the grants it found, under the same lock,
		mark: q(`UPDATE S.holds SET granted = true WHERE fam = $1 AND name = $2 AND seq = ANY($3::bigint[])`),
		// and settles its row, telling the waiters that wait for it.
		settle: q(`WITH s AS (UPDATE S.holds SET weight = -weight WHERE fam = $1 AND name = $2 AND seq = $3 AND weight < 0 RETURNING seq)
SELECT pg_notify('CHAN', $1 || 'g:' || seq || ':' || $2) FROM s`),
		// The advisory lock before it (same batch, one transaction) makes
		// seq order the commit order of a name's rows, and this
		// statement's snapshot, taken after it, sees every earlier row.
		enqueue: q(`WITH me AS (
	INSERT INTO S.holds (fam, name, seq, kind, owner, nonce, permits, downgrade, token, expires, weight)
	SELECT $1, $2, n.seq, $3, $4, $5, $6, $7, CASE WHEN $8::bigint > 0 THEN $8::bigint ELSE n.seq END,
		clock_timestamp() + make_interval(secs => $9), $12
	FROM (SELECT nextval('S.seq') AS seq) n
	WHERE NOT $10::boolean OR ` + countSQL + ` = $11::integer
	RETURNING ` + rowCols + `)
SELECT ROW, false, ` + countSQL + ` FROM S.holds WHERE fam = $1 AND name = $2 AND expires > clock_timestamp()
UNION ALL SELECT *, true, ` + countSQL + ` FROM me`),
		// A waiter reads those before it, the downgraded readers and the
		// rows that may count against it though behind it (granted,
		// heavier than 1 or pending), and keeps its own row alive. It takes a new
		// token, its own if this read grants it: a heavier waiter granted
		// before it may hold a later seq, and tokens grow grant by grant
		// (a grant after a conflicting one reads after that one's read).
		recheck: q(`WITH me AS (
	UPDATE S.holds SET expires = clock_timestamp() + make_interval(secs => $4),
		token = CASE WHEN downgrade THEN token ELSE nextval('S.seq') END
	WHERE fam = $1 AND name = $2 AND seq = $3 AND expires > clock_timestamp()
	RETURNING ` + rowCols + `)
SELECT ROW, false, ` + countSQL + ` FROM S.holds
WHERE fam = $1 AND name = $2 AND expires > clock_timestamp() AND seq <> $3 AND (seq < $3 OR downgrade OR granted OR weight <> 1)
UNION ALL SELECT *, true, ` + countSQL + ` FROM me`),
	}
}
