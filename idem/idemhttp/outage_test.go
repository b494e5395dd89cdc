package idemhttp_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/idem"
	"github.com/orthrus-go/orthrus/idem/idemhttp"
	"github.com/orthrus-go/orthrus/idem/internal/idemtest"
	"github.com/orthrus-go/orthrus/switcher"
)

// testOutage is row 20 of the switched gate: Redis, the current engine,
// freezes while a request runs. The switcher moves to etcd by its
// breaker; new requests go there at once; the process claims its running
// attempt on etcd, so a duplicate in another process gets 409; the request
// in flight completes without waiting for Redis, its outcome is written to
// etcd at once (duplicates anywhere get the replay) and to Redis when Redis
// is back.
func testOutage(t *testing.T) {
	rs := idemtest.StartServer(t, "redis")
	switched := make(chan switcher.Event, 4)
	sw := newSwitcher(t, []string{"redis", "etcd"}, []string{rs.Addr(), etcdAddr},
		switcher.WithHealthCheck(100*time.Millisecond, 200*time.Millisecond), switcher.WithBreaker(1, time.Hour),
		switcher.OnSwitch(func(e switcher.Event) { switched <- e }))
	mk := func() *idem.Gate {
		g, err := idem.FromSwitcher(sw, namespace(t), idem.WithLogger(quiet()), idem.WithRequestTimeout(300*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = g.Close() })
		return g
	}
	a, b := mk(), mk() // two processes
	started, release := make(chan struct{}), make(chan struct{})
	h := &counting{answer: func(n int32, _ http.ResponseWriter, _ *http.Request) bool {
		if n == 2 { // the first run after the warm-up
			close(started)
			<-release
		}
		return false
	}}
	srvA, srvB := serve(t, a, h), serve(t, b, h)
	check(t, "warm-up", send(http.MethodPost, srvB.URL, "w", key("warm")...), http.StatusCreated, false)
	first := make(chan response, 1)
	go func() { first <- send(http.MethodPost, srvA.URL, "a", key("k20")...) }()
	await(t, started, "the first request in the handler")
	if err := rs.Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rs.Resume() })
	select {
	case e := <-switched:
		if e.To != "etcd" {
			t.Fatalf("switched to %q; want etcd", e.To)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the switcher did not leave the frozen Redis within 10s")
	}

	// A new request goes to etcd at once; it also makes gate a claim its
	// running attempt there.
	start := time.Now()
	check(t, "a new request during the freeze", send(http.MethodPost, srvA.URL, "n", key("new")...), http.StatusCreated, false)
	if took := time.Since(start); took > time.Second {
		t.Errorf("a new request took %v after the switch; want the previous store's check (%v) at most, not the request timeout", took, idem.DefaultCheckPrevious)
	}
	idemtest.Eventually(t, 5*time.Second, "the running attempt claimed on etcd", func() (bool, error) { return a.Pending() == 0, nil })
	check(t, "a duplicate in another process while the first runs", send(http.MethodPost, srvB.URL, "a", key("k20")...), http.StatusConflict, false)

	start = time.Now()
	close(release)
	check(t, "the request in flight", await(t, first, "the first response"), http.StatusCreated, false)
	if took := time.Since(start); took > time.Second {
		t.Errorf("the request in flight took %v to complete; want no wait for the frozen store", took)
	}
	if n := a.Pending(); n != 1 {
		t.Errorf("Pending() = %d; want 1 (the outcome for Redis)", n)
	}
	check(t, "a duplicate in the same process during the freeze", send(http.MethodPost, srvA.URL, "a", key("k20")...), http.StatusCreated, true)
	check(t, "a duplicate in another process during the freeze", send(http.MethodPost, srvB.URL, "a", key("k20")...), http.StatusCreated, true)

	if err := rs.Resume(); err != nil {
		t.Fatal(err)
	}
	idemtest.Eventually(t, 15*time.Second, "the pending outcome written", func() (bool, error) { return a.Pending() == 0, nil })
	id, _ := idemhttp.KeyID(a, "", "k20")
	for _, store := range []string{"redis", "etcd"} {
		if rec, _, ok, err := a.Lookup(context.Background(), store, id); err != nil || !ok || rec.State != idem.Succeeded {
			t.Errorf("record on %s: %+v, %v, %v; want succeeded", store, rec, ok, err)
		}
	}
	check(t, "a duplicate after the recovery", send(http.MethodPost, srvA.URL, "a", key("k20")...), http.StatusCreated, true)
	h.want(t, 3) // warm-up, k20 once, new
}
