package idemhttp_test

import (
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/orthrus-go/orthrus/idem"
	"github.com/orthrus-go/orthrus/idem/idemhttp"
	"github.com/orthrus-go/orthrus/idem/internal/idemtest"
	"github.com/orthrus-go/orthrus/locker"
)

// Addresses of the servers TestMain starts for the package.
var redisAddr, etcdAddr, zkAddr string

func TestMain(m *testing.M) {
	idemtest.Main(m, func(redis, etcd, zk string) { redisAddr, etcdAddr, zkAddr = redis, etcd, zk })
}

func newGate(t *testing.T, addr string, opts ...idem.Option) *idem.Gate {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	s, err := idem.NewRedisStore(c, idem.WithPrefix("idemhttp:"+t.Name()))
	if err != nil {
		t.Fatal(err)
	}
	opts = append([]idem.Option{idem.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))}, opts...)
	g, err := idem.New("idemhttp-test", s, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	return g
}

// serve starts a real server with the middleware around h.
func serve(t *testing.T, g *idem.Gate, h http.Handler, opts ...idemhttp.Option) *httptest.Server {
	t.Helper()
	mw, err := idemhttp.Middleware(g, opts...)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(mw(h))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the panic test's panic
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

type response struct {
	status   int
	body     string
	header   http.Header
	err      error
	replayed bool
}

func post(url, key, body string) response {
	if key == "" {
		return send(http.MethodPost, url, body)
	}
	if !strings.HasPrefix(key, `"`) {
		key = `"` + key + `"` // the draft's sf-string
	}
	return send(http.MethodPost, url, body, idemhttp.Header, key)
}

func check(t *testing.T, what string, r response, status int, replayed bool) {
	t.Helper()
	if r.err != nil || r.status != status || r.replayed != replayed {
		t.Errorf("%s: %d %q (replayed %v), %v; want %d (replayed %v)", what, r.status, r.body, r.replayed, r.err, status, replayed)
	}
}

// Concurrent clients send one request: it runs once, the others get 409
// while it runs, later ones get its response replayed, and the key reused
// with another body gets 422.
func TestConcurrentClients(t *testing.T) {
	const clients = 20
	var runs atomic.Int32
	release := make(chan struct{})
	srv := serve(t, newGate(t, redisAddr), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := runs.Add(1)
		body, _ := io.ReadAll(r.Body) // the handler still gets the body
		<-release
		w.Header().Set("X-Receipt", fmt.Sprint("R-", n))
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "paid %s", body)
	}))
	url := srv.URL + "/payments"
	results := make(chan response, clients)
	for range clients {
		go func() { results <- post(url, `"k-1"`, `{"amount":5}`) }()
	}
	for i := range clients - 1 {
		check(t, fmt.Sprintf("concurrent duplicate %d", i), <-results, http.StatusConflict, false)
	}
	close(release)
	first := <-results
	check(t, "the request that ran", first, http.StatusCreated, false)
	if first.body != `paid {"amount":5}` || first.header.Get("X-Receipt") != "R-1" {
		t.Errorf("first response %q, X-Receipt %q; want %q, R-1", first.body, first.header.Get("X-Receipt"), `paid {"amount":5}`)
	}

	for range 5 {
		go func() { results <- post(url, "k-1", `{"amount":5}`) }() // post quotes it: the same key
	}
	for i := range 5 {
		r := <-results
		check(t, fmt.Sprintf("later duplicate %d", i), r, http.StatusCreated, true)
		if r.body != first.body || r.header.Get("X-Receipt") != "R-1" {
			t.Errorf("replay %q, X-Receipt %q; want the first response", r.body, r.header.Get("X-Receipt"))
		}
	}
	check(t, "same key, other body", post(url, "k-1", `{"amount":500}`), http.StatusUnprocessableEntity, false)
	check(t, "same key, other path", post(srv.URL+"/refunds", "k-1", `{"amount":5}`), http.StatusUnprocessableEntity, false)
	if n := runs.Load(); n != 1 {
		t.Errorf("handler ran %d times; want 1", n)
	}
}

// A failed response (5xx) or a panic frees the key, so the retry runs; a
// request without the key, or with another method, is not guarded.
func TestFailuresAndPassThrough(t *testing.T) {
	var runs atomic.Int32
	srv := serve(t, newGate(t, redisAddr), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch runs.Add(1) {
		case 1:
			http.Error(w, "database down", http.StatusServiceUnavailable)
		case 2:
			panic("boom")
		default:
			w.WriteHeader(http.StatusAccepted)
		}
	}))
	check(t, "first try", post(srv.URL, "k-2", "x"), http.StatusServiceUnavailable, false)
	// The handler panics and the server drops the connection; Go's client
	// resends a request that has an Idempotency-Key on its own, and that
	// retry runs since the panic freed the key.
	check(t, "second try (panic, then the client's own retry)", post(srv.URL, "k-2", "x"), http.StatusAccepted, false)
	check(t, "after success", post(srv.URL, "k-2", "x"), http.StatusAccepted, true)
	if n := runs.Load(); n != 3 {
		t.Errorf("handler ran %d times; want 3", n)
	}

	before := runs.Load()
	check(t, "no key", post(srv.URL, "", "x"), http.StatusAccepted, false)
	check(t, "no key again", post(srv.URL, "", "x"), http.StatusAccepted, false)
	resp, err := http.Get(srv.URL) // GET is not guarded
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if n := runs.Load() - before; n != 3 {
		t.Errorf("unguarded requests ran the handler %d times; want 3", n)
	}
}

func TestBadRequests(t *testing.T) {
	var ran atomic.Bool
	srv := serve(t, newGate(t, redisAddr), http.HandlerFunc(func(http.ResponseWriter, *http.Request) { ran.Store(true) }),
		idemhttp.WithRequired(), idemhttp.WithMaxBody(8), idemhttp.WithMaxKeyLen(4))
	check(t, "missing key", post(srv.URL, "", "x"), http.StatusBadRequest, false)
	check(t, "long key", post(srv.URL, "12345", "x"), http.StatusBadRequest, false)
	check(t, "big body", post(srv.URL, "k", "123456789"), http.StatusRequestEntityTooLarge, false)
	if ran.Load() {
		t.Error("the handler ran for a bad request")
	}
	for _, opt := range []idemhttp.Option{idemhttp.WithMethods(), idemhttp.WithMaxBody(-1), idemhttp.WithMaxKeyLen(0),
		idemhttp.WithScope(nil), idemhttp.WithFailure(nil), idemhttp.WithLogger(nil), nil} {
		if _, err := idemhttp.Middleware(newGate(t, redisAddr), opt); !errors.Is(err, locker.ErrInvalidArgument) {
			t.Errorf("Middleware with a bad option: %v; want ErrInvalidArgument", err)
		}
	}
	if _, err := idemhttp.Middleware(nil); !errors.Is(err, locker.ErrInvalidArgument) {
		t.Errorf("Middleware(nil): %v; want ErrInvalidArgument", err)
	}
}

// With the store paused, a fail-closed gate answers 503 and a fail-open
// gate runs the request, both within the request timeout.
func TestStoreDown(t *testing.T) {
	srvRedis := idemtest.StartServer(t, "redis")
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusCreated) })
	closed := serve(t, newGate(t, srvRedis.Addr(), idem.WithRequestTimeout(200*time.Millisecond)), ok)
	open := serve(t, newGate(t, srvRedis.Addr(), idem.WithRequestTimeout(200*time.Millisecond), idem.WithPolicy(idem.FailOpen)), ok)
	check(t, "warm-up", post(closed.URL, "w", "x"), http.StatusCreated, false)
	if err := srvRedis.Pause(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srvRedis.Resume() }()
	start := time.Now()
	r := post(closed.URL, "k-3", "x")
	check(t, "fail-closed", r, http.StatusServiceUnavailable, false)
	if r.header.Get("Retry-After") == "" {
		t.Error("503 without Retry-After")
	}
	check(t, "fail-open", post(open.URL, "k-3", "x"), http.StatusCreated, false)
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("two requests took %v with the store paused; want about 2 request timeouts (200ms)", took)
	}
}
