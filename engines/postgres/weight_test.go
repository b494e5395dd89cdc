package postgres_test

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orthrus-go/orthrus/engines/postgres"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/inspect"
	"github.com/orthrus-go/orthrus/locker/lockertest"
)

// queued starts l's LockCtx and waits until e shows n waiters of kind on
// name; it returns the result channel.
func queued(t *testing.T, e *postgres.Engine, kind inspect.Kind, name string, l locker.Locker, n int) <-chan error {
	t.Helper()
	done := lockAsync(l, t.Context())
	// Inspect lists a heavy arrival's row while it is still pending; a
	// release before it settles legitimately grants the waiters it would
	// have passed, so wait for it to settle too.
	pool := newPool(t, dsn)
	eventually(t, 10*time.Second, fmt.Sprintf("%d settled waiters of %v %q", n, kind, name), func() bool {
		in, err := e.InspectFamily(context.Background(), kind, name)
		var pending int
		perr := pool.QueryRow(context.Background(), `SELECT count(*) FROM weights.holds WHERE name = $1 AND weight < 0`, name).Scan(&pending)
		return err == nil && perr == nil && len(in.Waiters) == n && pending == 0
	})
	return done
}

// got returns v to a test, which fails on err.
func got[T any](v T, err error) func(*testing.T) T {
	return func(t *testing.T) T {
		t.Helper()
		noErr(t, err)
		return v
	}
}

func noErr(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// passed runs three acquisitions of one name on engines of their own (as
// three processes): holder holds; light, then heavy, come to wait; heavy
// is granted at holder's release, then light at heavy's. Tokens grow grant
// by grant although heavy came last.
func passed(t *testing.T, kind inspect.Kind, name string, holder, light, heavy func(*postgres.Engine) locker.Handle) {
	engine := func() *postgres.Engine { return newEngine(t, newPool(t, dsn), postgres.WithSchema("weights")) }
	e := engine()
	order := []locker.Handle{holder(e), heavy(engine()), light(engine())}
	noErr(t, order[0].Lock())
	lightDone := queued(t, e, kind, name, order[2], 1)
	heavyDone := queued(t, e, kind, name, order[1], 2)
	tokens := []uint64{order[0].Token()}
	noErr(t, order[0].Unlock())
	lockertest.WantGranted(t, heavyDone, "the heavier waiter")
	lockertest.WantPending(t, lightDone, "the lighter waiter while the heavier one holds")
	tokens = append(tokens, order[1].Token())
	noErr(t, order[1].Unlock())
	lockertest.WantGranted(t, lightDone, "the lighter waiter last")
	tokens = append(tokens, order[2].Token())
	noErr(t, order[2].Unlock())
	if !slices.IsSorted(tokens) || tokens[0] == tokens[1] || tokens[1] == tokens[2] {
		t.Errorf("tokens %v in grant order; want them growing", tokens)
	}
}

// TestWeightedRW: behind a writer, a heavier writer that came after a
// reader is granted before it.
func TestWeightedRW(t *testing.T) {
	name := uniqueName(t)
	side := func(read bool, opts ...locker.Option) func(*postgres.Engine) locker.Handle {
		return func(e *postgres.Engine) locker.Handle {
			rw := got(e.NewRWLock(name, opts...))(t)
			if read {
				return rw.ReadLock()
			}
			return rw.WriteLock()
		}
	}
	passed(t, inspect.KindRead, name, side(false), side(true), side(false, locker.WithWeight(5)))
}

// TestWeightedReaderKeepsHolder: a heavy reader that comes while a light
// writer holds waits (the writer's grant, recorded at its arrival, is
// not taken back), and the inspection shows the writer holding.
func TestWeightedReaderKeepsHolder(t *testing.T) {
	rw := func(l locker.RWLock, err error) locker.RWLock { return got(l, err)(t) }
	name := uniqueName(t)
	e := newEngine(t, newPool(t, dsn), postgres.WithSchema("weights"))
	holder, waiter := rw(e.NewRWLock(name)), rw(e.NewRWLock(name))
	reader := rw(e.NewRWLock(name, locker.WithWeight(10)))
	noErr(t, holder.WriteLock().Lock())
	waitDone := queued(t, e, inspect.KindWrite, name, waiter.WriteLock(), 1)
	readDone := queued(t, e, inspect.KindRead, name, reader.ReadLock(), 2)
	lockertest.WantPending(t, readDone, "the weight-10 reader behind the writer")
	in := got(e.InspectFamily(context.Background(), inspect.KindWrite, name))(t)
	if len(in.Holders) != 1 || in.Holders[0].Token != holder.WriteLock().Token() {
		t.Errorf("InspectFamily() holders %+v; want the writer with token %d alone", in.Holders, holder.WriteLock().Token())
	}
	noErr(t, holder.WriteLock().Unlock())
	lockertest.WantGranted(t, readDone, "the weight-10 reader")
	lockertest.WantPending(t, waitDone, "the weight-1 writer while the reader holds")
	noErr(t, reader.ReadLock().Unlock())
	lockertest.WantGranted(t, waitDone, "the weight-1 writer last")
	noErr(t, waiter.WriteLock().Unlock())
}

// TestWeightedSemaphore: a heavier request for 2 permits of 2 is granted
// before a lighter, older request for 1.
func TestWeightedSemaphore(t *testing.T) {
	name := uniqueName(t)
	permits := func(n int, opts ...locker.Option) func(*postgres.Engine) locker.Handle {
		return func(e *postgres.Engine) locker.Handle {
			return got(got(e.NewSemaphore(name, 2, opts...))(t).NewPermit(n))(t)
		}
	}
	passed(t, inspect.KindPermit, name, permits(2), permits(1), permits(2, locker.WithWeight(3)))
}

// TestPendingArrivalHoldsGrants: while a heavy arrival's row is pending
// (inserted, the grants it found not yet recorded), a waiter concludes no
// grant: it waits for the row to settle or go. The test's row, of weight
// -5, stays pending until the test deletes it.
func TestPendingArrivalHoldsGrants(t *testing.T) {
	p := newPool(t, dsn)
	e := newEngine(t, p, postgres.WithSchema("weights"))
	name := uniqueName(t)
	holder, waiter := newLocker(t, e, name), newLocker(t, e, name)
	noErr(t, holder.Lock())
	done := lockAsync(waiter, t.Context())
	waitRows(t, p, "weights", name, 2)
	ctx := context.Background()
	var seq int64
	noErr(t, p.QueryRow(ctx, `INSERT INTO weights.holds (fam, name, seq, kind, owner, nonce, permits, downgrade, token, expires, weight)
		SELECT 0, $1, s, $2, 'pending', 0, 1, false, s, clock_timestamp() + interval '1 minute', -5 FROM nextval('weights.seq') s
		RETURNING seq`, name, int16(inspect.KindMutex)).Scan(&seq))
	noErr(t, holder.Unlock())
	lockertest.WantPending(t, done, "the waiter while a heavy arrival is pending")
	_, err := p.Exec(ctx, `WITH d AS (DELETE FROM weights.holds WHERE seq = $1 RETURNING seq)
		SELECT pg_notify('weights_locks', '0:' || seq || ':' || $2) FROM d`, seq, name)
	noErr(t, err)
	lockertest.WantGranted(t, done, "the waiter once the pending row went")
	noErr(t, waiter.Unlock())
}

// A schema made before weights gets the weight column on the engine's
// first request, and ranks a heavy waiter.
func TestSchemaWithoutWeightUpgraded(t *testing.T) {
	p := newPool(t, dsn)
	ctx := context.Background()
	schema := oldSchema(t, p, "ALTER TABLE %q.holds DROP COLUMN weight;")
	e := newEngine(t, p, postgres.WithSchema(schema))
	name := uniqueName(t)
	holder, light, heavy := newLocker(t, e, name), newLocker(t, e, name), newLocker(t, e, name, locker.WithWeight(2))
	noErr(t, holder.Lock())
	var n int
	if err := p.QueryRow(ctx, "SELECT count(*) FROM pg_attribute WHERE attrelid = to_regclass($1) AND attname = 'weight'",
		fmt.Sprintf("%q.holds", schema)).Scan(&n); err != nil || n != 1 {
		t.Fatalf("weight columns = %d (%v); want the engine to have made it", n, err)
	}
	lightDone := lockAsync(light, t.Context())
	waitRows(t, p, schema, name, 2)
	heavyDone := lockAsync(heavy, t.Context())
	waitRows(t, p, schema, name, 3)
	noErr(t, holder.Unlock())
	lockertest.WantGranted(t, heavyDone, "the weight-2 waiter")
	noErr(t, heavy.Unlock())
	lockertest.WantGranted(t, lightDone, "the weight-1 waiter")
	noErr(t, light.Unlock())
}

// A heavy arrival's transaction that PostgreSQL aborts as a deadlock's
// victim (here with a transaction locking the arrival's row, then the
// holder's row it marks, in the other order, as a renewal can) is tried
// again within the caller's budget: the caller sees no error.
func TestHeavyArrivalDeadlockRetried(t *testing.T) {
	name := uniqueName(t)
	ctx := t.Context()
	pool := newPool(t, dsn)
	other := got(pool.Acquire(ctx))(t)
	defer other.Release()
	exec := func(sql string, args ...any) error { _, err := other.Exec(ctx, sql, args...); return err }
	// The test's transaction waits longest before it looks for a
	// deadlock, so that the arrival's is the one PostgreSQL aborts.
	noErr(t, exec(`SET deadlock_timeout = '60s'`))
	var tries atomic.Int32
	crossed := make(chan error, 1)
	settle := func() {
		if tries.Add(1) > 1 {
			return
		}
		// Before the arrival's transaction, lock its row; once it waits
		// for it (having marked the holder's row), lock the holder's row
		// too, and roll back once PostgreSQL has aborted the arrival's.
		var heavy, holder int64
		err := pool.QueryRow(ctx, `SELECT min(seq) FILTER (WHERE weight < 0), min(seq) FILTER (WHERE weight > 0)
FROM weights.holds WHERE name = $1`, name).Scan(&heavy, &holder)
		if err = cmp.Or(err, exec(`BEGIN`), exec(`UPDATE weights.holds SET expires = expires WHERE seq = $1`, heavy)); err != nil {
			crossed <- err
			return
		}
		go func() {
			err := waitForLock(ctx, pool, "%SET weight = -weight%")
			crossed <- cmp.Or(err, exec(`UPDATE weights.holds SET expires = expires WHERE seq = $1`, holder), exec(`ROLLBACK`))
		}()
	}
	e := newEngine(t, pool, postgres.WithSchema("weights"))
	heavyEngine := newEngine(t, newPool(t, dsn), postgres.WithSchema("weights"), postgres.WithBeforeSettle(settle))
	holder := newLocker(t, e, name)
	noErr(t, holder.Lock())
	done := lockAsync(newLocker(t, heavyEngine, name, locker.WithWeight(3)), ctx)
	noErr(t, <-crossed)
	select {
	case err := <-done:
		t.Fatalf("the heavy waiter's Lock returned %v before the holder's release", err)
	default:
	}
	noErr(t, holder.Unlock())
	if err := <-done; err != nil {
		t.Fatalf("the heavy waiter's Lock: %v, want no error: a deadlock's victim is tried again", err)
	}
	if n := tries.Load(); n != 2 {
		t.Fatalf("the arrival's transaction ran %d times, want 2", n)
	}
}

// waitForLock returns once a session running a statement like query waits
// for a lock: no event tells it.
func waitForLock(ctx context.Context, pool *pgxpool.Pool, query string) error {
	for waiting := 0; waiting == 0; time.Sleep(10 * time.Millisecond) {
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE $1`, query).Scan(&waiting); err != nil {
			return err
		}
	}
	return nil
}
