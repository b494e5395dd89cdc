package idemhttp_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/orthrus-go/orthrus/engines/etcd"
	"github.com/orthrus-go/orthrus/engines/redis"
	"github.com/orthrus-go/orthrus/engines/zk"
	"github.com/orthrus-go/orthrus/idem"
	"github.com/orthrus-go/orthrus/idem/idemhttp"
	"github.com/orthrus-go/orthrus/idem/internal/idemtest"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/switcher"
)

// The checklist of issue 29, one subtest per row, on each store and on
// the gate FromSwitcher builds over a switcher of the three engines.
var kinds = []string{"redis", "etcd", "zk", "switched"}

// expiryOf is the shortest expiry a kind honours: etcd leases are whole
// seconds.
func expiryOf(kind string) time.Duration {
	if kind == "etcd" {
		return time.Second
	}
	return 300 * time.Millisecond
}

// observer counts the gate's round trips and Begin outcomes.
type observer struct {
	calls    atomic.Int64
	outcomes [8]atomic.Int64
	pending  atomic.Int64
}

func (o *observer) BeginStart(ctx context.Context) context.Context { return ctx }
func (o *observer) BeginEnd(_ context.Context, e idem.BeginEvent) {
	o.outcomes[e.Outcome].Add(1)
}
func (o *observer) StoreCall(context.Context, string, string, time.Duration, error) { o.calls.Add(1) }

// noIO checks that the gate made no round trip.
func (o *observer) noIO(t *testing.T) {
	t.Helper()
	if n := o.calls.Load(); n != 0 {
		t.Errorf("%d store round trips; want 0", n)
	}
}

func (o *observer) Pending(_ string, d int) { o.pending.Add(int64(d)) }

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func redisClient(t testing.TB, addr string) *goredis.Client {
	c := idemtest.RedisClient(addr)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func etcdClient(t testing.TB, addr string) *clientv3.Client {
	c, err := idemtest.EtcdClient(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// namespaces gives each test its own namespace (and application key),
// new on every run: the servers outlive a -count run.
var (
	namespaces sync.Map // testing.TB → string
	runs       atomic.Int64
)

func namespace(t testing.TB) string {
	ns, _ := namespaces.LoadOrStore(t, fmt.Sprintf("idemhttp/%d/%s", runs.Add(1),
		strings.NewReplacer("/", "-", " ", "_", "#", "_").Replace(t.Name())))
	return ns.(string)
}

// await receives from c within 10s: a gate that never lets a request in
// fails the test rather than hanging it.
func await[T any](t *testing.T, c <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("no %s within 10s", what)
		var zero T
		return zero
	}
}

// storeOf returns a store of kind on addr, in the test's namespace.
func storeOf(t testing.TB, kind, addr string) idem.Store {
	t.Helper()
	s, closeFn, err := idemtest.OpenStore(kind, addr, namespace(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeFn)
	return s
}

// engineOf returns a lock engine of kind on addr, named kind.
func engineOf(t testing.TB, kind, addr string) locker.Engine {
	t.Helper()
	var e locker.Engine
	var err error
	switch kind {
	case "redis":
		e, err = redis.New(redisClient(t, addr), redis.WithName("redis"), redis.WithLogger(quiet()))
	case "etcd":
		e, err = etcd.New(etcdClient(t, addr), etcd.WithName("etcd"), etcd.WithLogger(quiet()))
	case "zk":
		e, err = zk.New([]string{addr}, zk.WithName("zk"), zk.WithLogger(quiet()))
	}
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// newSwitcher returns a switcher over engines of kinds on addrs, which
// only the test switches unless fast is set.
func newSwitcher(t testing.TB, kinds, addrs []string, opts ...switcher.Option) *switcher.Switcher {
	t.Helper()
	var engines []locker.Engine
	for i, k := range kinds {
		engines = append(engines, engineOf(t, k, addrs[i]))
	}
	opts = append([]switcher.Option{switcher.WithHealthCheck(time.Hour, time.Second), switcher.WithLogger(quiet())}, opts...)
	sw, err := switcher.New(engines, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sw.Close() })
	return sw
}

// gateOf returns a gate of kind, observed, closed at the test's end.
func gateOf(t testing.TB, kind string, opts ...idem.Option) (*idem.Gate, *observer) {
	t.Helper()
	o := &observer{}
	opts = append([]idem.Option{idem.WithLogger(quiet()), idem.WithObserver(o)}, opts...)
	var g *idem.Gate
	var err error
	if kind == "switched" {
		sw := newSwitcher(t, []string{"redis", "etcd", "zk"}, []string{redisAddr, etcdAddr, zkAddr})
		g, err = idem.FromSwitcher(sw, namespace(t), opts...)
	} else {
		g, err = idem.New(namespace(t), storeOf(t, kind, idemtest.Addr(kind)), opts...)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	return g, o
}

// send sends a request with the given headers (name, value pairs; a
// name twice makes two header lines).
func send(method, url, body string, headers ...string) response {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		return response{err: err}
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return response{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return response{status: resp.StatusCode, body: string(b), header: resp.Header, err: err,
		replayed: resp.Header.Get(idemhttp.ReplayedHeader) == "true"}
}

func isProblem(t *testing.T, what string, r response) {
	t.Helper()
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("%s: Content-Type %q; want application/problem+json", what, ct)
	}
}

// counting is a handler that counts its runs and answers 201 with a
// receipt, unless answer says otherwise.
type counting struct {
	runs   atomic.Int32
	answer func(n int32, w http.ResponseWriter, r *http.Request) bool // true: answered
}

func (c *counting) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := c.runs.Add(1)
	if c.answer != nil && c.answer(n, w, r) {
		return
	}
	body, _ := io.ReadAll(r.Body)
	w.Header().Set("X-Receipt", fmt.Sprint("R-", n))
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, "done %s", body)
}

func (c *counting) want(t *testing.T, n int32) {
	t.Helper()
	if got := c.runs.Load(); got != n {
		t.Errorf("handler ran %d times; want %d", got, n)
	}
}

func key(k string) []string { return []string{idemhttp.Header, `"` + k + `"`} }

func TestChecklist(t *testing.T) {
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			for _, row := range rows {
				t.Run(row.name, func(t *testing.T) { row.run(t, kind) })
			}
		})
	}
}

var rows = []struct {
	name string
	run  func(t *testing.T, kind string)
}{
	{"01-new-key", row01}, {"02-replay", row02}, {"03-mismatch", row03}, {"04-concurrent", row04},
	{"05-required", row05}, {"06-optional", row06}, {"07-sf-string", row07}, {"08-malformed", row08},
	{"09-methods", row09}, {"10-failure", row10}, {"11-not-stored", row11}, {"12-retention", row12},
	{"13-crashed", row13}, {"14-tenants", row14}, {"15-store-down", row15}, {"16-subset", row16},
	{"17-replay-hook", row17}, {"18-disabled", row18}, {"19-local-cache", row19}, {"20-switch", row20},
}

// lookup returns the record of key on the gate's current store.
func lookup(t *testing.T, g *idem.Gate, scope, k string) (idem.Record, bool) {
	t.Helper()
	id, err := idemhttp.KeyID(g, scope, k)
	if err != nil {
		t.Fatal(err)
	}
	rec, _, ok, err := g.Lookup(context.Background(), "", id)
	if err != nil {
		t.Fatalf("Lookup(%s) = %v", k, err)
	}
	return rec, ok
}

// 1: a new key runs the handler once and records the outcome.
func row01(t *testing.T, kind string) {
	g, _ := gateOf(t, kind)
	h := &counting{}
	srv := serve(t, g, h)
	check(t, "new key", send(http.MethodPost, srv.URL+"/pay", "a", key("k1")...), http.StatusCreated, false)
	h.want(t, 1)
	if rec, ok := lookup(t, g, "", "k1"); !ok || rec.State != idem.Succeeded {
		t.Errorf("record %+v, %v; want succeeded", rec, ok)
	}
}

// 2: the same key and body after completion replays status, headers and
// body, marked Idempotent-Replayed, without running the handler.
func row02(t *testing.T, kind string) {
	g, _ := gateOf(t, kind)
	h := &counting{}
	srv := serve(t, g, h)
	first := send(http.MethodPost, srv.URL+"/pay", "a", key("k2")...)
	check(t, "first", first, http.StatusCreated, false)
	again := send(http.MethodPost, srv.URL+"/pay", "a", key("k2")...)
	check(t, "again", again, http.StatusCreated, true)
	if again.body != first.body || again.header.Get("X-Receipt") != "R-1" {
		t.Errorf("replay %q, X-Receipt %q; want %q, R-1", again.body, again.header.Get("X-Receipt"), first.body)
	}
	h.want(t, 1)
}

// 3: the same key with another body, URI or method is 422 problem+json.
func row03(t *testing.T, kind string) {
	g, _ := gateOf(t, kind)
	h := &counting{}
	srv := serve(t, g, h)
	check(t, "first", send(http.MethodPost, srv.URL+"/pay", "a", key("k3")...), http.StatusCreated, false)
	for _, r := range []struct{ what, method, path, body string }{
		{"other body", http.MethodPost, "/pay", "b"},
		{"other URI", http.MethodPost, "/refund", "a"},
		{"other method", http.MethodPatch, "/pay", "a"},
	} {
		resp := send(r.method, srv.URL+r.path, r.body, key("k3")...)
		check(t, r.what, resp, http.StatusUnprocessableEntity, false)
		isProblem(t, r.what, resp)
	}
	h.want(t, 1)
}

// 4: the same key while the first runs is 409, and the 409 records
// nothing: the first's response is what a later retry gets.
func row04(t *testing.T, kind string) {
	g, _ := gateOf(t, kind)
	started, release := make(chan struct{}), make(chan struct{})
	h := &counting{answer: func(n int32, _ http.ResponseWriter, _ *http.Request) bool {
		if n == 1 {
			close(started)
			<-release
		}
		return false
	}}
	srv := serve(t, g, h)
	first := make(chan response, 1)
	go func() { first <- send(http.MethodPost, srv.URL+"/pay", "a", key("k4")...) }()
	await(t, started, "the first request in the handler")
	dup := send(http.MethodPost, srv.URL+"/pay", "a", key("k4")...)
	check(t, "while running", dup, http.StatusConflict, false)
	isProblem(t, "409", dup)
	if rec, ok := lookup(t, g, "", "k4"); !ok || rec.State != idem.Running {
		t.Errorf("record after the 409: %+v, %v; want the first's, running", rec, ok)
	}
	close(release)
	check(t, "first", await(t, first, "the first response"), http.StatusCreated, false)
	check(t, "after", send(http.MethodPost, srv.URL+"/pay", "a", key("k4")...), http.StatusCreated, true)
	h.want(t, 1)
}

// 5: a required key that is missing is 400 problem+json.
func row05(t *testing.T, kind string) {
	g, o := gateOf(t, kind)
	h := &counting{}
	srv := serve(t, g, h, idemhttp.WithRequired())
	r := send(http.MethodPost, srv.URL, "a")
	check(t, "missing key", r, http.StatusBadRequest, false)
	isProblem(t, "400", r)
	h.want(t, 0)
	o.noIO(t)
}

// 6: an optional key that is missing runs unguarded, with no store I/O.
func row06(t *testing.T, kind string) {
	g, o := gateOf(t, kind)
	h := &counting{}
	srv := serve(t, g, h)
	check(t, "no key", send(http.MethodPost, srv.URL, "a"), http.StatusCreated, false)
	check(t, "no key again", send(http.MethodPost, srv.URL, "a"), http.StatusCreated, false)
	h.want(t, 2)
	o.noIO(t)
}

// 7: "abc" is the sf-string whose value is abc; escapes are decoded.
func row07(t *testing.T, kind string) {
	g, _ := gateOf(t, kind)
	h := &counting{}
	srv := serve(t, g, h)
	check(t, `"abc"`, send(http.MethodPost, srv.URL, "a", idemhttp.Header, `"abc"`), http.StatusCreated, false)
	if _, ok := lookup(t, g, "", "abc"); !ok {
		t.Error(`no record under the key abc`)
	}
	check(t, `"a\"b\\c"`, send(http.MethodPost, srv.URL, "a", idemhttp.Header, `"a\"b\\c"`), http.StatusCreated, false)
	if _, ok := lookup(t, g, "", `a"b\c`); !ok {
		t.Error(`no record under the key a"b\c`)
	}
	// WithBareKeys: a Stripe-style bare key is the same key as its sf-string.
	bare := serve(t, g, h, idemhttp.WithBareKeys())
	check(t, "bare abc", send(http.MethodPost, bare.URL, "a", idemhttp.Header, `abc`), http.StatusCreated, true)
	h.want(t, 2)
}

// 8: a malformed key, a key too long, or two Idempotency-Key headers are
// 400, with no store I/O.
func row08(t *testing.T, kind string) {
	g, o := gateOf(t, kind)
	h := &counting{}
	srv := serve(t, g, h, idemhttp.WithMaxKeyLen(8))
	for _, c := range []struct {
		what    string
		headers []string
	}{
		{"bare token", []string{idemhttp.Header, `abc`}},
		{"no closing quote", []string{idemhttp.Header, `"abc`}},
		{"text after the string", []string{idemhttp.Header, `"abc"x`}},
		{"a list", []string{idemhttp.Header, `"abc", "def"`}},
		{"bad escape", []string{idemhttp.Header, `"a\bc"`}},
		{"empty string", []string{idemhttp.Header, `""`}},
		{"non-ASCII", []string{idemhttp.Header, "\"caf\u00e9\""}},
		{"too long", []string{idemhttp.Header, `"123456789"`}},
		{"two headers", []string{idemhttp.Header, `"abc"`, idemhttp.Header, `"def"`}},
		{"two equal headers", []string{idemhttp.Header, `"abc"`, idemhttp.Header, `"abc"`}},
	} {
		r := send(http.MethodPost, srv.URL, "a", c.headers...)
		check(t, c.what, r, http.StatusBadRequest, false)
		isProblem(t, c.what, r)
	}
	h.want(t, 0)
	o.noIO(t)
}

// 9: GET, PUT and DELETE with a key are not guarded by default; the
// guarded methods are configurable.
func row09(t *testing.T, kind string) {
	g, o := gateOf(t, kind)
	h := &counting{}
	srv := serve(t, g, h)
	for _, m := range []string{http.MethodGet, http.MethodPut, http.MethodDelete} {
		for range 2 {
			check(t, m, send(m, srv.URL, "", key("k9")...), http.StatusCreated, false)
		}
	}
	h.want(t, 6)
	o.noIO(t)
	put := serve(t, g, h, idemhttp.WithMethods(http.MethodPut))
	check(t, "PUT guarded", send(http.MethodPut, put.URL, "a", key("k9")...), http.StatusCreated, false)
	check(t, "PUT guarded again", send(http.MethodPut, put.URL, "a", key("k9")...), http.StatusCreated, true)
	h.want(t, 7)
}

// 10: a 5xx or a panic deletes the record and the retry runs; with
// WithFailure saying no status fails, a 5xx is replayed.
func row10(t *testing.T, kind string) {
	g, _ := gateOf(t, kind)
	h := &counting{answer: func(n int32, w http.ResponseWriter, _ *http.Request) bool {
		switch n {
		case 1:
			http.Error(w, "database down", http.StatusServiceUnavailable)
			return true
		case 2:
			panic("boom")
		}
		return false
	}}
	srv := serve(t, g, h)
	check(t, "5xx", send(http.MethodPost, srv.URL, "a", key("k10")...), http.StatusServiceUnavailable, false)
	// The panic drops the connection; Go's client resends a request with
	// an Idempotency-Key by itself, and that retry runs.
	check(t, "panic, then the client's retry", send(http.MethodPost, srv.URL, "a", key("k10")...), http.StatusCreated, false)
	h.want(t, 3)

	h5 := &counting{answer: func(_ int32, w http.ResponseWriter, _ *http.Request) bool {
		http.Error(w, "database down", http.StatusServiceUnavailable)
		return true
	}}
	keep := serve(t, g, h5, idemhttp.WithFailure(func(int) bool { return false }))
	check(t, "5xx kept", send(http.MethodPost, keep.URL, "a", key("k10b")...), http.StatusServiceUnavailable, false)
	check(t, "5xx replayed", send(http.MethodPost, keep.URL, "a", key("k10b")...), http.StatusServiceUnavailable, true)
	h5.want(t, 1)
}

// 11: a 4xx the handler gives before any side effect is not stored: the
// fixed request runs with the same key. WithNotStored() stores it.
func row11(t *testing.T, kind string) {
	g, _ := gateOf(t, kind)
	h := &counting{answer: func(_ int32, w http.ResponseWriter, r *http.Request) bool {
		if b, _ := io.ReadAll(r.Body); string(b) != "ok" {
			http.Error(w, "amount missing", http.StatusUnprocessableEntity)
			return true
		}
		w.WriteHeader(http.StatusCreated)
		return true
	}}
	srv := serve(t, g, h, idemhttp.WithFingerprint(func(r *http.Request, _ []byte) ([]byte, error) { return []byte(r.URL.Path), nil }))
	check(t, "invalid", send(http.MethodPost, srv.URL, "bad", key("k11")...), http.StatusUnprocessableEntity, false)
	check(t, "fixed", send(http.MethodPost, srv.URL, "ok", key("k11")...), http.StatusCreated, false)
	check(t, "fixed again", send(http.MethodPost, srv.URL, "ok", key("k11")...), http.StatusCreated, true)
	h.want(t, 2)

	store := serve(t, g, h, idemhttp.WithNotStored())
	check(t, "invalid, stored", send(http.MethodPost, store.URL, "bad", key("k11b")...), http.StatusUnprocessableEntity, false)
	check(t, "invalid, replayed", send(http.MethodPost, store.URL, "bad", key("k11b")...), http.StatusUnprocessableEntity, true)
	h.want(t, 3)
}

// 12: a retry after the retention is a new request.
func row12(t *testing.T, kind string) {
	exp := expiryOf(kind)
	g, _ := gateOf(t, kind, idem.WithExpiry(exp), idem.WithRetention(exp))
	h := &counting{}
	srv := serve(t, g, h)
	done := time.Now()
	check(t, "first", send(http.MethodPost, srv.URL, "a", key("k12")...), http.StatusCreated, false)
	check(t, "within the retention", send(http.MethodPost, srv.URL, "a", key("k12")...), http.StatusCreated, true)
	idemtest.Eventually(t, exp+10*time.Second, "a new request after the retention", func() (bool, error) {
		r := send(http.MethodPost, srv.URL, "a", key("k12")...)
		if !r.replayed && time.Since(done) < exp {
			t.Fatalf("ran again %v after the first, within the retention %v", time.Since(done), exp)
		}
		return r.status == http.StatusCreated && !r.replayed, nil
	})
	h.want(t, 2)
}

// 13: an attempt that never reports (its process died, here: hangs) gets
// 409 for its retries until its own deadline has passed
// (WithExpiryFromDeadline), well before the 30s expiry; then a retry runs.
func row13(t *testing.T, kind string) {
	g, _ := gateOf(t, kind, idem.WithExpiry(30*time.Second), idem.WithExpiryFromDeadline())
	hung := make(chan struct{})
	started := make(chan struct{})
	h := &counting{answer: func(n int32, _ http.ResponseWriter, _ *http.Request) bool {
		if n == 1 {
			close(started)
			<-hung // never reports while the test looks
		}
		return false
	}}
	mw, err := idemhttp.Middleware(g)
	if err != nil {
		t.Fatal(err)
	}
	deadline := expiryOf(kind) + 700*time.Millisecond
	withDeadline := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), deadline)
		defer cancel()
		mw(h).ServeHTTP(w, r.WithContext(ctx))
	})
	srv := httptest.NewServer(withDeadline)
	t.Cleanup(srv.Close)
	first := make(chan response, 1)
	t.Cleanup(func() { close(hung); <-first }) // before srv.Close: the hung request ends
	begun := time.Now()
	go func() { first <- send(http.MethodPost, srv.URL, "a", key("k13")...) }()
	await(t, started, "the first request in the handler")
	check(t, "before the deadline", send(http.MethodPost, srv.URL, "a", key("k13")...), http.StatusConflict, false)
	idemtest.Eventually(t, 10*time.Second, "retry runs after the attempt's deadline", func() (bool, error) {
		r := send(http.MethodPost, srv.URL, "a", key("k13")...)
		if r.status == http.StatusCreated && time.Since(begun) < deadline {
			t.Fatalf("retry ran %v after the attempt began, before its deadline %v", time.Since(begun), deadline)
		}
		return r.status == http.StatusCreated, nil
	})
	if took := time.Since(begun); took > 10*time.Second {
		t.Errorf("retry ran after %v; want about the deadline %v, not the 30s expiry", took, deadline)
	}
	h.want(t, 2)
}

// 14: the same key from two tenants is two operations.
func row14(t *testing.T, kind string) {
	g, _ := gateOf(t, kind)
	h := &counting{}
	srv := serve(t, g, h, idemhttp.WithScope(func(r *http.Request) string { return r.Header.Get("X-Tenant") }))
	for _, tenant := range []string{"acme", "globex"} {
		check(t, tenant, send(http.MethodPost, srv.URL, "a", append(key("k14"), "X-Tenant", tenant)...), http.StatusCreated, false)
	}
	for _, tenant := range []string{"acme", "globex"} {
		r := send(http.MethodPost, srv.URL, "a", append(key("k14"), "X-Tenant", tenant)...)
		check(t, tenant+" again", r, http.StatusCreated, true)
		if want := map[string]string{"acme": "R-1", "globex": "R-2"}[tenant]; r.header.Get("X-Receipt") != want {
			t.Errorf("%s replayed receipt %q; want %q", tenant, r.header.Get("X-Receipt"), want)
		}
	}
	h.want(t, 2)
}

// 15: with the store down, a fail-closed gate answers 503 with
// Retry-After, a fail-open gate runs the request; both within the
// request timeout.
func row15(t *testing.T, kind string) {
	srvKind := kind
	if kind == "switched" {
		srvKind = "redis" // the current engine of the switcher
	}
	server := idemtest.StartServer(t, srvKind)
	timeout := 300 * time.Millisecond
	mk := func(policy idem.Policy) *idem.Gate {
		opts := []idem.Option{idem.WithLogger(quiet()), idem.WithRequestTimeout(timeout), idem.WithPolicy(policy)}
		var g *idem.Gate
		var err error
		if kind == "switched" {
			sw := newSwitcher(t, []string{"redis", "etcd"}, []string{server.Addr(), etcdAddr})
			g, err = idem.FromSwitcher(sw, namespace(t), opts...)
		} else {
			g, err = idem.New(namespace(t), storeOf(t, kind, server.Addr()), opts...)
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = g.Close() })
		return g
	}
	h := &counting{}
	closed, open := serve(t, mk(idem.FailClosed), h), serve(t, mk(idem.FailOpen), h)
	idemtest.Eventually(t, 20*time.Second, "warm-up", func() (bool, error) {
		return send(http.MethodPost, closed.URL, "a", key("warm")...).status == http.StatusCreated, nil
	})
	if err := server.Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = server.Resume() })
	start := time.Now()
	r := send(http.MethodPost, closed.URL, "a", key("k15")...)
	check(t, "fail-closed", r, http.StatusServiceUnavailable, false)
	isProblem(t, "503", r)
	if r.header.Get("Retry-After") == "" {
		t.Error("503 without Retry-After")
	}
	check(t, "fail-open", send(http.MethodPost, open.URL, "a", key("k15")...), http.StatusCreated, false)
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("two requests took %v with the store paused; want about two request timeouts (%v)", took, timeout)
	}
}

// 16: a fingerprint over chosen fields: the same fields replay, a
// volatile field does not count, another value of a chosen field is 422.
func row16(t *testing.T, kind string) {
	g, _ := gateOf(t, kind)
	h := &counting{}
	srv := serve(t, g, h, idemhttp.WithFingerprint(idemhttp.JSONFields("amount", "card.last4")))
	check(t, "first", send(http.MethodPost, srv.URL, `{"amount":5,"card":{"last4":"4242"},"ts":1}`, key("k16")...), http.StatusCreated, false)
	check(t, "volatile field changed", send(http.MethodPost, srv.URL, `{"ts":2,"card":{"last4":"4242"},"amount":5}`, key("k16")...), http.StatusCreated, true)
	check(t, "chosen field changed", send(http.MethodPost, srv.URL, `{"amount":6,"card":{"last4":"4242"},"ts":1}`, key("k16")...), http.StatusUnprocessableEntity, false)
	check(t, "nested chosen field changed", send(http.MethodPost, srv.URL, `{"amount":5,"card":{"last4":"0000"},"ts":1}`, key("k16")...), http.StatusUnprocessableEntity, false)
	check(t, "not JSON", send(http.MethodPost, srv.URL, `amount=5`, key("k16b")...), http.StatusBadRequest, false)
	h.want(t, 1)
}

// 17: the replay hook is called on a replay only, with the stored record.
func row17(t *testing.T, kind string) {
	g, _ := gateOf(t, kind)
	var mu sync.Mutex
	var seen []*idem.Duplicate
	started, release := make(chan struct{}), make(chan struct{})
	h := &counting{answer: func(n int32, _ http.ResponseWriter, _ *http.Request) bool {
		if n == 1 {
			close(started)
			<-release
		}
		return false
	}}
	srv := serve(t, g, h, idemhttp.WithOnReplay(func(w http.ResponseWriter, _ *http.Request, d *idem.Duplicate) {
		mu.Lock()
		seen = append(seen, d)
		mu.Unlock()
		w.Header().Set("X-Replay-Of", d.Begun.UTC().Format(time.RFC3339Nano))
	}))
	first := make(chan response, 1)
	go func() { first <- send(http.MethodPost, srv.URL, "a", key("k17")...) }()
	await(t, started, "the first request in the handler")
	check(t, "409", send(http.MethodPost, srv.URL, "a", key("k17")...), http.StatusConflict, false)
	close(release)
	check(t, "first", await(t, first, "the first response"), http.StatusCreated, false)
	check(t, "422", send(http.MethodPost, srv.URL, "b", key("k17")...), http.StatusUnprocessableEntity, false)
	r := send(http.MethodPost, srv.URL, "a", key("k17")...)
	check(t, "replay", r, http.StatusCreated, true)
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 1 {
		t.Fatalf("hook called %d times; want once, for the replay", len(seen))
	}
	if d := seen[0]; d.State != idem.Succeeded || len(d.Result) == 0 || r.header.Get("X-Replay-Of") == "" {
		t.Errorf("hook got %+v, header %q; want the succeeded record with its result", *d, r.header.Get("X-Replay-Of"))
	}
}

// 18: a disabled gate runs every request, with no store I/O.
func row18(t *testing.T, kind string) {
	g, o := gateOf(t, kind, idem.WithDisabled(true))
	h := &counting{}
	srv := serve(t, g, h)
	check(t, "first", send(http.MethodPost, srv.URL, "a", key("k18")...), http.StatusCreated, false)
	check(t, "again", send(http.MethodPost, srv.URL, "a", key("k18")...), http.StatusCreated, false)
	h.want(t, 2)
	o.noIO(t)
	if n := o.outcomes[idem.OutcomeUnguarded].Load(); n != 2 {
		t.Errorf("%d unguarded Begins; want 2", n)
	}
}

// 19: with a local cache, a replay within its life makes no round trip;
// without it, a replay does.
func row19(t *testing.T, kind string) {
	for _, cached := range []bool{true, false} {
		var opts []idem.Option
		if cached {
			opts = append(opts, idem.WithLocalCache(100, time.Minute))
		}
		g, o := gateOf(t, kind, opts...)
		h := &counting{}
		srv := serve(t, g, h)
		k := fmt.Sprintf("k19-%v", cached)
		check(t, "first", send(http.MethodPost, srv.URL, "a", key(k)...), http.StatusCreated, false)
		before := o.calls.Load()
		check(t, "replay", send(http.MethodPost, srv.URL, "a", key(k)...), http.StatusCreated, true)
		if n := o.calls.Load() - before; (n == 0) != cached {
			t.Errorf("cache %v: the replay made %d round trips", cached, n)
		}
		h.want(t, 1)
	}
}

// 20: an engine switch while a request runs: the request completes and is
// recorded on the engine it began on; a duplicate sent to another process
// (another gate), which now uses the new engine, gets 409 while it runs
// and the replay after. The switched gate's column is the outage: see
// TestOutage.
func row20(t *testing.T, kind string) {
	if kind == "switched" {
		testOutage(t)
		return
	}
	next := map[string]string{"redis": "etcd", "etcd": "zk", "zk": "redis"}[kind]
	sw := newSwitcher(t, []string{kind, next}, []string{idemtest.Addr(kind), idemtest.Addr(next)})
	mk := func() *idem.Gate {
		g, err := idem.FromSwitcher(sw, namespace(t), idem.WithLogger(quiet()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = g.Close() })
		return g
	}
	a, b := mk(), mk()
	started, release := make(chan struct{}), make(chan struct{})
	h := &counting{answer: func(n int32, _ http.ResponseWriter, _ *http.Request) bool {
		if n == 1 {
			close(started)
			<-release
		}
		return false
	}}
	srvA, srvB := serve(t, a, h), serve(t, b, h)
	first := make(chan response, 1)
	go func() { first <- send(http.MethodPost, srvA.URL, "a", key("k20")...) }()
	await(t, started, "the first request in the handler")
	if _, err := sw.SwitchEngineTo(next); err != nil {
		t.Fatal(err)
	}
	check(t, "duplicate on the new engine while the first runs", send(http.MethodPost, srvB.URL, "a", key("k20")...), http.StatusConflict, false)
	close(release)
	check(t, "first", await(t, first, "the first response"), http.StatusCreated, false)
	id, _ := idemhttp.KeyID(a, "", "k20")
	if rec, _, ok, err := a.Lookup(context.Background(), kind, id); err != nil || !ok || rec.State != idem.Succeeded {
		t.Errorf("record on %s: %+v, %v, %v; want succeeded", kind, rec, ok, err)
	}
	check(t, "duplicate on the new engine after", send(http.MethodPost, srvB.URL, "a", key("k20")...), http.StatusCreated, true)
	h.want(t, 1)
}
