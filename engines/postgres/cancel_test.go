package postgres_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/engines/postgres"
	"github.com/orthrus-go/orthrus/internal/logtest"
	"github.com/orthrus-go/orthrus/internal/testserver"
	"github.com/orthrus-go/orthrus/locker"
)

// stallSQL makes every insert into schema's holds wait while the test
// holds advisory lock 4242, and ignore the cancel request pgx sends as it
// drops the connection: as a backend does that had not read the batch yet
// when the cancel came, or had begun to commit.
func stallSQL(schema string) string {
	return fmt.Sprintf(`CREATE OR REPLACE FUNCTION %[1]s.stall() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	LOOP
		BEGIN
			PERFORM pg_advisory_xact_lock_shared(4242);
			RETURN NEW;
		EXCEPTION WHEN query_canceled THEN
		END;
	END LOOP;
END $$;
DROP TRIGGER IF EXISTS stall ON %[1]s.holds;
CREATE TRIGGER stall BEFORE INSERT ON %[1]s.holds FOR EACH ROW EXECUTE FUNCTION %[1]s.stall();`, schema)
}

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
	_, err := test.Exec(ctx, stallSQL("orphans"))
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

// A role refused pg_terminate_backend (EXECUTE revoked here; before
// PostgreSQL 14 its two-argument form does not exist) cannot end the
// backend of a cancelled wait's insert. The withdrawal then falls back to
// the DELETE alone and says so at DEBUG, rather than retrying a refusal
// until the release timeout; the row the insert commits after it is
// reaped at its TTL, and the name is granted again.
func TestCancelledInsertTerminateRefused(t *testing.T) {
	ctx := t.Context()
	s := testserver.Postgres(t) // of its own: the REVOKE is server-wide
	admin := newPool(t, s.DSN())
	_, err := admin.Exec(ctx, `CREATE ROLE app LOGIN; CREATE SCHEMA app AUTHORIZATION app;
REVOKE EXECUTE ON FUNCTION pg_terminate_backend(integer, bigint) FROM PUBLIC`)
	noErr(t, err)
	asApp := fmt.Sprintf("postgres://app@%s/postgres?sslmode=disable", s.Addr())
	logs := &logtest.Buffer{}
	debug := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	e := newEngine(t, newPool(t, asApp), postgres.WithSchema("app"), postgres.WithLogger(debug))
	noErr(t, e.Ping(ctx)) // makes the tables
	test := got(admin.Acquire(ctx))(t)
	defer test.Release()
	_, err = test.Exec(ctx, stallSQL("app"))
	noErr(t, err)
	_, err = test.Exec(ctx, `SELECT pg_advisory_lock(4242)`)
	noErr(t, err)

	name := uniqueName(t)
	lctx, cancel := context.WithCancel(ctx)
	done := lockAsync(newLocker(t, e, name, locker.WithTTL(time.Second)), lctx)
	noErr(t, waitForLock(ctx, admin, `%INSERT INTO "app".holds%`))
	cancel()
	if err := <-done; err != context.Canceled {
		t.Fatalf("LockCtx() = %v; want context.Canceled", err)
	}
	// Close waits for the withdrawal, which a refusal retried would hold
	// up to the release timeout (5 s).
	start := time.Now()
	noErr(t, e.Close())
	if took := time.Since(start); took >= 2*time.Second {
		t.Errorf("Close() took %v; want the withdrawal done at once", took)
	}
	if out := logs.String(); !strings.Contains(out, "could not end the backend of a dropped insert") || !strings.Contains(out, "permission denied") {
		t.Errorf("logs:\n%s\nwant a DEBUG saying the backend could not be ended (permission denied)", out)
	}
	_, err = test.Exec(ctx, `SELECT pg_advisory_unlock(4242)`)
	noErr(t, err)
	// The degradation the fallback accepts: the insert commits its row
	// after the DELETE ran.
	eventually(t, 10*time.Second, "the stalled insert's row", func() bool {
		n, err := rowCount(ctx, admin, "app", name)
		return err == nil && n == 1
	})

	next := newEngine(t, newPool(t, asApp), postgres.WithSchema("app"))
	lctx, cancel = context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	l := newLocker(t, next, name)
	if err := l.LockCtx(lctx); err != nil {
		t.Fatalf("LockCtx() after the row's TTL = %v; want the name granted", err)
	}
	noErr(t, l.Unlock())
}
