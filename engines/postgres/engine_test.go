package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orthrus-go/orthrus/engines/postgres"
	"github.com/orthrus-go/orthrus/internal/testserver"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/lockertest"
)

// eventually polls cond every 10ms for up to d: the rows are the server's,
// which sends no event for them.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(d)
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("%s: not within %v", what, d)
		}
	}
}

func uniqueName(t *testing.T) string { return fmt.Sprintf("%s-%d", t.Name(), time.Now().UnixNano()) }

func lockAsync(l locker.Locker, ctx context.Context) <-chan error {
	done := make(chan error, 1)
	go func() { done <- l.LockCtx(ctx) }()
	return done
}

// Owners on three engines, each with a pool of its own (three processes),
// hammer one name: never two inside at once, and tokens only grow. This
// checks that one batch, under the name's advisory lock, orders the rows
// as they commit.
func TestHammerExclusion(t *testing.T) {
	name := uniqueName(t)
	const engines, owners, rounds = 3, 4, 100
	var (
		inside atomic.Int32
		mu     sync.Mutex
		last   uint64
		wg     sync.WaitGroup
		errs   = make(chan error, engines*owners*rounds)
	)
	for range engines {
		e := newEngine(t, newPool(t, dsn), postgres.WithSchema("hammer"))
		for i := range owners {
			l := newLocker(t, e, name)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range rounds {
					// TryLock enqueues on a name often free, where two
					// inserts racing would both see themselves first.
					if i%2 == 0 {
						if ok, err := l.TryLock(); err != nil || !ok {
							if err != nil {
								errs <- err
								return
							}
							continue
						}
					} else if err := l.Lock(); err != nil {
						errs <- err
						return
					}
					if n := inside.Add(1); n != 1 {
						errs <- fmt.Errorf("%d owners inside at once", n)
					}
					mu.Lock()
					if tok := l.Token(); tok <= last {
						errs <- fmt.Errorf("token %d after %d; want it to grow", tok, last)
					} else {
						last = tok
					}
					mu.Unlock()
					inside.Add(-1)
					if err := l.Unlock(); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// A waiter on another engine is granted at the holder's release far sooner
// than its fallback timer (a third of the 30s TTL, or the holder's expiry):
// the release's NOTIFY woke it.
func TestHandoffByNotify(t *testing.T) {
	p := newPool(t, dsn)
	a, b := newEngine(t, p, postgres.WithSchema("handoff")), newEngine(t, newPool(t, dsn), postgres.WithSchema("handoff"))
	name := uniqueName(t)
	holder := newLocker(t, a, name)
	if err := holder.Lock(); err != nil {
		t.Fatal(err)
	}
	t.Logf("hand-off took %v", handOff(t, p, "handoff", holder, newLocker(t, b, name)))
}

// handOff queues waiter behind holder, releases holder and wants waiter
// granted within 5s, half its fallback timer (a third of the 30s TTL):
// a notification's work. It returns how long the hand-off took.
func handOff(t *testing.T, p *pgxpool.Pool, schema string, holder, waiter locker.Handle) time.Duration {
	t.Helper()
	done := lockAsync(waiter, context.Background())
	waitRows(t, p, schema, holder.Name(), 2)
	start := time.Now()
	if err := holder.Unlock(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("waiter's LockCtx() = %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("waiter not granted 5s after the release; the fallback is 10s: no notification woke it")
	}
	took := time.Since(start)
	if err := waiter.Unlock(); err != nil {
		t.Error(err)
	}
	return took
}

// waitRows waits until a mutex name has n rows: a holder and n-1 waiters.
func waitRows(t *testing.T, p *pgxpool.Pool, schema, name string, n int) {
	t.Helper()
	eventually(t, 10*time.Second, fmt.Sprintf("%d rows of %q", n, name), func() bool {
		got, err := rowCount(context.Background(), p, schema, name)
		return err == nil && got == n
	})
}

// A cancelled waiter deletes its row, so the next owner is granted at the
// release without waiting for its expiry.
func TestCancelledWaiterLeavesNoRow(t *testing.T) {
	p := newPool(t, dsn)
	e := newEngine(t, p, postgres.WithSchema("cancel"))
	name := uniqueName(t)
	holder, waiter := newLocker(t, e, name), newLocker(t, e, name)
	if err := holder.Lock(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := lockAsync(waiter, ctx)
	waitRows(t, p, "cancel", name, 2)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("LockCtx() after cancel = %v; want context.Canceled", err)
	}
	waitRows(t, p, "cancel", name, 1)
	if err := holder.Unlock(); err != nil {
		t.Fatal(err)
	}
	waitRows(t, p, "cancel", name, 0)
}

// The reaper deletes rows long expired, and leaves live ones.
func TestReaperRemovesExpiredRows(t *testing.T) {
	p := newPool(t, dsn)
	e := newEngine(t, p, postgres.WithSchema("reaped"), postgres.WithReap(20*time.Millisecond, 0))
	name := uniqueName(t)
	live := newLocker(t, e, name+"/live")
	if err := live.Lock(); err != nil { // makes the tables and starts the reaper
		t.Fatal(err)
	}
	defer func() { _ = live.Unlock() }()
	if _, err := p.Exec(context.Background(), `INSERT INTO reaped.holds (fam, name, seq, kind, owner, nonce, permits, downgrade, token, expires)
		VALUES (0, $1, nextval('reaped.seq'), 0, 'dead', 0, 1, false, 0, clock_timestamp() - interval '1 second')`, name); err != nil {
		t.Fatal(err)
	}
	waitRows(t, p, "reaped", name, 0)
	if n, err := rowCount(context.Background(), p, "reaped", name+"/live"); n != 1 || err != nil {
		t.Errorf("live hold's rows = %d, %v; want 1", n, err)
	}
}

// Two applications in schemas of their own, each with a role that may only
// use its own: the intruder can neither take, wait for, read nor force the
// owner's holds.
func TestIsolation(t *testing.T) {
	admin := newPool(t, dsn)
	suffix := time.Now().UnixNano()
	roles := [2]string{fmt.Sprintf("app1_%d", suffix), fmt.Sprintf("app2_%d", suffix)}
	for _, r := range roles {
		if _, err := admin.Exec(context.Background(), fmt.Sprintf("CREATE ROLE %s LOGIN; CREATE SCHEMA %s AUTHORIZATION %s", r, r, r)); err != nil {
			t.Fatal(err)
		}
	}
	dsnAs := func(role string) string {
		return fmt.Sprintf("postgres://%s@%s/postgres?sslmode=disable", role, shared.Addr())
	}
	owner := newEngine(t, newPool(t, dsnAs(roles[0])), postgres.WithSchema(roles[0]))
	intruder := newEngine(t, newPool(t, dsnAs(roles[1])), postgres.WithSchema(roles[0]))
	if err := owner.Ping(context.Background()); err != nil {
		t.Fatalf("owner Ping() = %v", err)
	}
	lockertest.Isolation(t, owner, intruder)
}

// TLS with verify-full against the test CA, and a client certificate (the
// server requires one on TLS connections).
func TestTLS(t *testing.T) {
	certs := testserver.TestCerts(t)
	s := testserver.Postgres(t, testserver.WithTLS(certs))
	base := fmt.Sprintf("postgres://postgres@%s/postgres?sslmode=verify-full", s.TLSAddr())
	t.Run("verified", func(t *testing.T) {
		p := newPool(t, fmt.Sprintf("%s&sslrootcert=%s&sslcert=%s&sslkey=%s", base, certs.CAFile, certs.ClientCertFile, certs.ClientKeyFile))
		l := newLocker(t, newEngine(t, p), t.Name())
		if ok, err := l.TryLock(); !ok || err != nil {
			t.Fatalf("TryLock() = %v, %v; want true, nil", ok, err)
		}
		var ssl bool
		if err := p.QueryRow(context.Background(), "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").Scan(&ssl); err != nil || !ssl {
			t.Errorf("connection ssl = %v, %v; want true", ssl, err)
		}
		if err := l.Unlock(); err != nil {
			t.Errorf("Unlock() = %v", err)
		}
	})
	t.Run("no client certificate", func(t *testing.T) {
		e := newEngine(t, newPool(t, fmt.Sprintf("%s&sslrootcert=%s", base, certs.CAFile)), postgres.WithRequestTimeout(time.Second))
		if err := e.Ping(context.Background()); err == nil {
			t.Errorf("Ping() without a client certificate = nil; want an error")
		}
	})
}

// The listening connection killed by the server (pg_terminate_backend):
// the engine listens again, and a hand-off is still woken by NOTIFY, not
// by the 10s fallback.
func TestListenerReconnects(t *testing.T) {
	p := newPool(t, dsn)
	e := newEngine(t, p, postgres.WithSchema("relisten"))
	name := uniqueName(t)
	holder, waiter := newLocker(t, e, name), newLocker(t, e, name)
	if err := holder.Lock(); err != nil {
		t.Fatal(err)
	}
	old := listening(t, p, "relisten", 0)
	if _, err := p.Exec(context.Background(), "SELECT pg_terminate_backend($1)", old); err != nil {
		t.Fatal(err)
	}
	listening(t, p, "relisten", old)
	handOff(t, p, "relisten", holder, waiter)
}

// listening waits until the engine of schema listens on a connection
// other than not, and returns its backend's pid.
func listening(t *testing.T, p *pgxpool.Pool, schema string, not int) int {
	t.Helper()
	var pid int
	eventually(t, 10*time.Second, fmt.Sprintf("the engine listening (not on %d)", not), func() bool {
		pid = 0
		_ = p.QueryRow(context.Background(), "SELECT pid FROM pg_stat_activity WHERE query = $1 AND state = 'idle'",
			"LISTEN "+pgx.Identifier{schema + "_locks"}.Sanitize()).Scan(&pid)
		return pid != 0 && pid != not
	})
	return pid
}

// An outage long enough for the listener's backoff to reach its most
// (2s), then the server back: once listening again the backoff starts
// over, and the next dropped connection is listened to again at once, not
// 2s later, during which waiters would only have their timers.
func TestListenerBackoffResets(t *testing.T) {
	s := testserver.Postgres(t)
	p := newPool(t, s.DSN())
	e := newEngine(t, p, postgres.WithSchema("backoff"))
	l := newLocker(t, e, uniqueName(t))
	if err := l.Lock(); err != nil { // starts the listener
		t.Fatal(err)
	}
	listening(t, p, "backoff", 0)
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(4 * time.Second) // the outage: tries at 50ms, 100ms, ... 1.6s, 2s apart
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	pid := listening(t, p, "backoff", 0)
	if _, err := p.Exec(context.Background(), "SELECT pg_terminate_backend($1)", pid); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	listening(t, p, "backoff", pid)
	if d := time.Since(start); d > time.Second {
		t.Errorf("listening again %v after the connection dropped; want well under the 2s the outage's backoff reached", d)
	}
}

// A held row deleted while the engine did not listen (here by a DELETE
// that notifies nobody, then the listening connection killed): the engine
// looks for its holds' rows when it listens again, and the hold is lost at
// once, not at its next renewal (a third of its 30s TTL).
func TestDeletedWhileNotListening(t *testing.T) {
	p := newPool(t, dsn)
	e := newEngine(t, p, postgres.WithSchema("unheard"))
	l := newLocker(t, e, uniqueName(t))
	if err := l.Lock(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	pid := listening(t, p, "unheard", 0)
	if _, err := p.Exec(ctx, "DELETE FROM unheard.holds WHERE name = $1", l.Name()); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Exec(ctx, "SELECT pg_terminate_backend($1)", pid); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("Lost() not closed 5s after the row went unheard and the listener reconnected")
	}
}

// A dead owner's row, which no release will notify, blocks until it
// expires; the waiter wakes then (its fallback timer is the soonest of its
// blockers' expiries), not a third of its TTL later.
func TestWaiterWakesAtBlockersExpiry(t *testing.T) {
	p := newPool(t, dsn)
	e := newEngine(t, p, postgres.WithSchema("expiry"))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := e.Ping(ctx); err != nil { // makes the tables
		t.Fatal(err)
	}
	name := uniqueName(t)
	const life = 500 * time.Millisecond
	if _, err := p.Exec(ctx, `INSERT INTO expiry.holds (fam, name, seq, kind, owner, nonce, permits, downgrade, token, expires)
		VALUES (0, $1, nextval('expiry.seq'), 0, 'dead', 0, 1, false, 0, clock_timestamp() + make_interval(secs => $2))`, name, life.Seconds()); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	l := newLocker(t, e, name)
	if err := l.LockCtx(ctx); err != nil {
		t.Fatalf("LockCtx() behind a dead owner's row = %v; want it granted at the row's expiry", err)
	}
	if d := time.Since(start); d < life-100*time.Millisecond {
		t.Errorf("granted %v after the dead owner's row was written; want after its expiry (%v)", d, life)
	}
	if err := l.Unlock(); err != nil {
		t.Error(err)
	}
}

// Close makes a waiting acquisition return ErrClosed and deletes its row.
func TestCloseWithdrawsWaiters(t *testing.T) {
	p := newPool(t, dsn)
	holding, waiting := newEngine(t, p, postgres.WithSchema("closing")), newEngine(t, p, postgres.WithSchema("closing"))
	name := uniqueName(t)
	holder := newLocker(t, holding, name)
	if err := holder.Lock(); err != nil {
		t.Fatal(err)
	}
	done := lockAsync(newLocker(t, waiting, name), context.Background())
	waitRows(t, p, "closing", name, 2)
	if err := waiting.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	if err := <-done; !errors.Is(err, locker.ErrClosed) {
		t.Errorf("LockCtx() across Close = %v; want ErrClosed", err)
	}
	waitRows(t, p, "closing", name, 1)
	if err := holder.Unlock(); err != nil {
		t.Error(err)
	}
}
