package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/engines/postgres"
)

// stallSQL makes every insert into the orphans schema's holds wait while
// the test holds advisory lock 4242, and ignore the cancel request pgx
// sends as it drops the connection: as a backend does that had not read
// the batch yet when the cancel came, or had begun to commit.
const stallSQL = `CREATE OR REPLACE FUNCTION orphans.stall() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	LOOP
		BEGIN
			PERFORM pg_advisory_xact_lock_shared(4242);
			RETURN NEW;
		EXCEPTION WHEN query_canceled THEN
		END;
	END LOOP;
END $$;
DROP TRIGGER IF EXISTS stall ON orphans.holds;
CREATE TRIGGER stall BEFORE INSERT ON orphans.holds FOR EACH ROW EXECUTE FUNCTION orphans.stall();`

// A wait cancelled while its insert is still running on the server leaves
// no row: the insert's backend, which the cancel does not stop and which
// commits the row after the withdrawal's DELETE has run, is ended before
// that DELETE. Without it the row holds the name's queue until its TTL.
func TestCancelledInsertLeavesNoRow(t *testing.T) {
	ctx := t.Context()
	pool := newPool(t, dsn)
	e := newEngine(t, newPool(t, dsn), postgres.WithSchema("orphans"))
	noErr(t, e.Ping(ctx)) // makes the tables
	test := got(pool.Acquire(ctx))(t)
	defer test.Release()
	_, err := test.Exec(ctx, stallSQL)
	noErr(t, err)
	_, err = test.Exec(ctx, `SELECT pg_advisory_lock(4242)`)
	noErr(t, err)

	name := uniqueName(t)
	lctx, cancel := context.WithCancel(ctx)
	done := lockAsync(newLocker(t, e, name), lctx)
	noErr(t, waitForLock(ctx, pool, `%INSERT INTO "orphans".holds%`))
	cancel()
	if err := <-done; err != context.Canceled {
		t.Fatalf("LockCtx() = %v; want context.Canceled", err)
	}
	// Close waits for the withdrawal the engine runs in the background;
	// then the insert may go on.
	noErr(t, e.Close())
	_, err = test.Exec(ctx, `SELECT pg_advisory_unlock(4242)`)
	noErr(t, err)
	// The lock is passed from session to session, never free between:
	// none is listed once every insert that waited for it is over.
	eventually(t, 10*time.Second, "the stalled insert over", func() bool {
		var n int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = 0 AND objid = 4242 AND objsubid = 1`).Scan(&n)
		return err == nil && n == 0
	})
	if rows := got(rowCount(ctx, pool, "orphans", name))(t); rows != 0 {
		t.Fatalf("rows of %q after its wait was cancelled and withdrawn = %d; want 0", name, rows)
	}
}
