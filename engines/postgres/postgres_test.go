package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orthrus-go/orthrus/engines/postgres"
	"github.com/orthrus-go/orthrus/internal/testmain"
	"github.com/orthrus-go/orthrus/internal/testserver"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/inspect"
	"github.com/orthrus-go/orthrus/locker/lockertest"
)

// The server shared by the package's tests and examples. Fault tests start
// servers of their own.
var (
	shared *testserver.Server
	dsn    string
)

func TestMain(m *testing.M) {
	testmain.Run(m, func() (func(), error) {
		var err error
		if shared, err = testserver.NewPostgres(); err != nil {
			return nil, err
		}
		dsn = shared.DSN()
		return func() { _ = shared.Stop() }, nil
	})
}

// newPool opens a pool on dsn and closes it when the test ends, after the
// engines over it (cleanups run last registered first).
func newPool(t testing.TB, dsn string) *pgxpool.Pool {
	t.Helper()
	p, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatalf("pgxpool.New(%q) = %v", dsn, err)
	}
	t.Cleanup(p.Close)
	return p
}

func newEngine(t testing.TB, p *pgxpool.Pool, opts ...postgres.Option) *postgres.Engine {
	t.Helper()
	e, err := postgres.New(p, opts...)
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

func newLocker(t testing.TB, e locker.Engine, name string, opts ...locker.Option) locker.Handle {
	t.Helper()
	l, err := e.NewLocker(name, opts...)
	if err != nil {
		t.Fatalf("NewLocker(%q) = %v", name, err)
	}
	return l
}

// rowCount counts the live and expired rows of a mutex name.
func rowCount(ctx context.Context, p *pgxpool.Pool, schema, name string) (int, error) {
	var n int
	err := p.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{schema}.Sanitize()+".holds WHERE fam = 0 AND name = $1", name).Scan(&n)
	return n, err
}

func harness(t *testing.T) lockertest.Harness { return harnessOn(t, dsn) }

func harnessOn(t *testing.T, dsn string) lockertest.Harness {
	p := newPool(t, dsn)
	causes := &lockertest.Causes{}
	e, err := postgres.New(p, postgres.WithSchema("conformance"), postgres.WithObserver(causes))
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	return lockertest.Harness{
		Engine: e,
		Causes: causes,
		// The holder is the mutex's first live row.
		Expire: func(ctx context.Context, name string) error {
			_, err := p.Exec(ctx, `DELETE FROM conformance.holds WHERE fam = 0 AND name = $1 AND seq =
				(SELECT min(seq) FROM conformance.holds WHERE fam = 0 AND name = $1 AND expires > clock_timestamp())`, name)
			return err
		},
		// As an operator would by hand, with the notification the package
		// doc gives, so that the holder notices at once.
		Delete: func(ctx context.Context, kind inspect.Kind, name string, token uint64) error {
			fam := map[inspect.Kind]int{inspect.KindMutex: 0, inspect.KindRead: 1, inspect.KindWrite: 1, inspect.KindPermit: 2}[kind]
			tag, err := p.Exec(ctx, `WITH d AS (DELETE FROM conformance.holds WHERE fam = $1 AND name = $2 AND token = $3 RETURNING seq)
				SELECT pg_notify('conformance_locks', $1 || ':' || seq || ':' || $2) FROM d`, fam, name, int64(token))
			if err == nil && tag.RowsAffected() != 1 {
				err = fmt.Errorf("%d rows of %v %q with token %d", tag.RowsAffected(), kind, name, token)
			}
			return err
		},
		NoticeDeleted: 2 * time.Second,
		// Every row but the holder's is a waiter's.
		Residue: func(ctx context.Context, name string) (int, error) {
			n, err := rowCount(ctx, p, "conformance", name)
			return max(n-1, 0), err
		},
	}
}

func TestConformance(t *testing.T) { lockertest.Run(t, harness) }

func TestRWConformance(t *testing.T) { lockertest.RunRW(t, harness) }

func TestSemaphoreConformance(t *testing.T) { lockertest.RunSemaphore(t, harness) }

func TestMultiConformance(t *testing.T) { lockertest.RunMulti(t, harness) }

func TestLockDelay(t *testing.T) { lockertest.RunLockDelay(t, harness) }

func TestElectionConformance(t *testing.T) { lockertest.RunElection(t, harness) }

func TestRunOnceConformance(t *testing.T) { lockertest.RunOnce(t, harness) }

// TestModel checks the engine against the lock family's rule, every kind
// and SetPermits included: two engines, each on a pool of its own, as two
// processes.
func TestModel(t *testing.T) {
	lockertest.RunModel(t, func(t *testing.T) lockertest.Harness {
		return lockertest.Harness{Engine: newEngine(t, newPool(t, dsn), postgres.WithSchema("model"))}
	}, lockertest.ModelOps, lockertest.ModelConfig{})
}

func TestNewRejectsBadInput(t *testing.T) {
	p := newPool(t, dsn)
	for _, tc := range []struct {
		desc string
		p    *pgxpool.Pool
		opt  postgres.Option
		want string
	}{
		{"nil pool", nil, postgres.WithName("x"), "pool is nil"},
		{"empty name", p, postgres.WithName(""), "WithName"},
		{"empty schema", p, postgres.WithSchema(""), "WithSchema"},
		{"quoted schema", p, postgres.WithSchema(`a"b`), "WithSchema"},
		{"system schema", p, postgres.WithSchema("pg_locks"), "WithSchema"},
		{"long schema", p, postgres.WithSchema(strings.Repeat("a", 58)), "WithSchema"},
		{"zero request timeout", p, postgres.WithRequestTimeout(0), "WithRequestTimeout"},
		{"nil logger", p, postgres.WithLogger(nil), "WithLogger"},
		{"nil observer", p, postgres.WithObserver(nil), "WithObserver"},
		{"nil option", p, nil, "nil Option"},
	} {
		e, err := postgres.New(tc.p, tc.opt)
		if !errors.Is(err, locker.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%s) = %v; want ErrInvalidArgument naming %s", tc.desc, err, tc.want)
		}
		if e != nil {
			_ = e.Close()
		}
	}
}

// A name's mutex, read-write lock and semaphore are independent locks.
func TestFamiliesIndependent(t *testing.T) {
	e := newEngine(t, newPool(t, dsn), postgres.WithSchema("families"))
	name := fmt.Sprintf("%s-%d", t.Name(), time.Now().UnixNano())
	m := newLocker(t, e, name)
	rw, err := e.NewRWLock(name)
	if err != nil {
		t.Fatal(err)
	}
	sem, err := e.NewSemaphore(name, 1)
	if err != nil {
		t.Fatal(err)
	}
	p, err := sem.NewPermit(1)
	if err != nil {
		t.Fatal(err)
	}
	for what, l := range map[string]locker.Handle{"mutex": m, "write": rw.WriteLock(), "permit": p} {
		if ok, err := l.TryLock(); !ok || err != nil {
			t.Errorf("%s TryLock() = %v, %v; want true, nil", what, ok, err)
		}
		defer func() { _ = l.Unlock() }()
	}
}

// WithoutSchemaCreation finds no tables in a fresh schema and says so,
// as a permission failure (no outage); SchemaSQL makes them.
func TestWithoutSchemaCreation(t *testing.T) {
	p := newPool(t, dsn)
	schema := fmt.Sprintf("bare%d", time.Now().UnixNano())
	e := newEngine(t, p, postgres.WithSchema(schema), postgres.WithoutSchemaCreation())
	l := newLocker(t, e, "x")
	if ok, err := l.TryLock(); ok || !errors.Is(err, locker.ErrPermission) || !strings.Contains(err.Error(), "SchemaSQL") {
		t.Fatalf("TryLock() without tables = %v, %v; want false, ErrPermission naming SchemaSQL", ok, err)
	}
	if _, err := p.Exec(context.Background(), postgres.SchemaSQL(schema)); err != nil {
		t.Fatalf("Exec(SchemaSQL) = %v", err)
	}
	if ok, err := l.TryLock(); !ok || err != nil {
		t.Fatalf("TryLock() after SchemaSQL = %v, %v; want true, nil", ok, err)
	}
	if err := l.Unlock(); err != nil {
		t.Errorf("Unlock() = %v", err)
	}
}

// A schema made before the seq index (renewal finds rows by seq alone)
// gets it on the engine's first request, and its holds renew.
func TestSchemaWithoutSeqIndexUpgraded(t *testing.T) {
	p := newPool(t, dsn)
	ctx := context.Background()
	schema := oldSchema(t, p, "DROP INDEX %q.holds_seq;")
	l := newLocker(t, newEngine(t, p, postgres.WithSchema(schema)), "x", locker.WithTTL(300*time.Millisecond))
	if err := l.Lock(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Unlock() }()
	var indexed bool
	if err := p.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", fmt.Sprintf("%q.holds_seq", schema)).Scan(&indexed); err != nil || !indexed {
		t.Fatalf("holds_seq exists = %v (%v); want the engine to have made it", indexed, err)
	}
	// Past three renewals: the hold is kept by them.
	select {
	case <-l.Lost():
		t.Fatal("hold lost; want it renewed")
	case <-time.After(time.Second):
	}
}

// oldSchema makes a schema of the engine's tables as an older version
// made them: SchemaSQL, then undo, a statement with %q for the schema.
func oldSchema(t *testing.T, p *pgxpool.Pool, undo string) string {
	t.Helper()
	schema := fmt.Sprintf("old%d", time.Now().UnixNano())
	if _, err := p.Exec(context.Background(), postgres.SchemaSQL(schema)+fmt.Sprintf(undo, schema)); err != nil {
		t.Fatal(err)
	}
	return schema
}

// The inspection of a name another engine holds shows its token.
func TestInspectOtherEngine(t *testing.T) {
	p := newPool(t, dsn)
	a, b := newEngine(t, p, postgres.WithSchema("insp")), newEngine(t, p, postgres.WithSchema("insp"))
	name := fmt.Sprintf("%s-%d", t.Name(), time.Now().UnixNano())
	l := newLocker(t, a, name)
	if err := l.Lock(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Unlock() }()
	in, err := b.Inspect(context.Background(), name)
	if err != nil || in.Holder == nil || in.Holder.Token != l.Token() {
		t.Fatalf("Inspect() = %+v, %v; want the holder with token %d", in, err, l.Token())
	}
	var _ inspect.Inspector = b
}

// A schema that needs quoting (upper case, '-', as lockctl's drill
// prefixes are) works in every statement, the notification channel
// included: a waiter is handed the lock by NOTIFY, well before its timer.
func TestQuotedSchema(t *testing.T) {
	p := newPool(t, dsn)
	schema := fmt.Sprintf("App-locks-%d", time.Now().UnixNano()%1e6)
	e := newEngine(t, p, postgres.WithSchema(schema))
	holder, waiter := newLocker(t, e, "q"), newLocker(t, e, "q")
	if err := holder.Lock(); err != nil {
		t.Fatal(err)
	}
	if d := handOff(t, p, schema, holder, waiter); d > time.Second {
		t.Errorf("hand-off in schema %q took %v; want it woken by NOTIFY", schema, d)
	}
	// The family's statements too: a semaphore's count set and inspected.
	ctx := context.Background()
	sem, err := e.NewSemaphore("q", 2)
	if err != nil {
		t.Fatal(err)
	}
	permit, err := sem.Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = permit.Unlock() }()
	if err := e.SetPermits(ctx, "q", 3); err != nil {
		t.Fatalf("SetPermits() = %v", err)
	}
	if fi, err := e.InspectFamily(ctx, inspect.KindPermit, "q"); err != nil || fi.Permits != 3 || len(fi.Holders) != 1 {
		t.Errorf("InspectFamily() = %+v, %v; want a count of 3 and one holder", fi, err)
	}
	var n int
	if err := p.QueryRow(ctx, "SELECT count(*) FROM pg_namespace WHERE nspname = $1", schema).Scan(&n); err != nil || n != 1 {
		t.Errorf("schema %q exists %d times (%v); want once, by its exact name", schema, n, err)
	}
}
