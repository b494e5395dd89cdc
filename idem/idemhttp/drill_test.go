package idemhttp_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/idem"
	"github.com/orthrus-go/orthrus/idem/idemhttp"
	"github.com/orthrus-go/orthrus/idem/internal/idemtest"
	"github.com/orthrus-go/orthrus/switcher"
)

// The outage target: Redis, the current engine, freezes for 10s
// under 50 requests/s (4 clients sending every key, retrying 409, 503 and
// dropped connections for 15s each), behind two servers with their own
// gates. Every operation runs once, every client ends with the 201, and
// once Redis is back and the gates have written what they kept, no record
// is left running on either engine.
func TestFreezeDrill(t *testing.T) {
	if testing.Short() {
		t.Skip("a 15s drill")
	}
	const (
		clients  = 4
		keysPerS = 12.5 // × 4 clients: 50 requests/s
		before   = 2 * time.Second
		freeze   = 10 * time.Second
		after    = 2 * time.Second
		budget   = 15 * time.Second // each client's retries of one key
	)
	rs := idemtest.StartServer(t, "redis")
	switched := make(chan switcher.Event, 4)
	sw := newSwitcher(t, []string{"redis", "etcd"}, []string{rs.Addr(), etcdAddr},
		switcher.WithHealthCheck(100*time.Millisecond, 200*time.Millisecond), switcher.WithBreaker(1, time.Hour),
		switcher.OnSwitch(func(e switcher.Event) { switched <- e }))
	var mu sync.Mutex
	runs := map[string]int{}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k := r.Header.Get(idemhttp.Header)
		mu.Lock()
		runs[k]++
		n := runs[k]
		mu.Unlock()
		time.Sleep(20 * time.Millisecond) // the operation's work
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "%s run %d", k, n)
	})
	var gates []*idem.Gate
	var urls []string
	for range 2 {
		g, err := idem.FromSwitcher(sw, namespace(t), idem.WithLogger(quiet()),
			idem.WithRequestTimeout(500*time.Millisecond), idem.WithExpiry(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = g.Close() })
		gates = append(gates, g)
		urls = append(urls, serve(t, g, h).URL)
	}

	type result struct {
		key      string
		status   int
		attempts int
		body     string
	}
	results := make(chan result, 1024)
	var wg sync.WaitGroup
	client := func(i int, k string) {
		defer wg.Done()
		deadline := time.Now().Add(budget)
		for n := 1; ; n++ {
			r := send(http.MethodPost, urls[(i+n)%len(urls)], "pay", idemhttp.Header, k)
			retry := r.err != nil || r.status == http.StatusConflict || r.status == http.StatusServiceUnavailable
			if !retry || time.Now().After(deadline) {
				results <- result{k, r.status, n, r.body}
				return
			}
			time.Sleep(100 * time.Millisecond) // the client's back-off
		}
	}
	tick := time.NewTicker(time.Duration(float64(time.Second) / keysPerS))
	defer tick.Stop()
	start := time.Now()
	froze, resumed := false, false
	var keys []string
	for n := 0; time.Since(start) < before+freeze+after; n++ {
		<-tick.C
		switch el := time.Since(start); {
		case !froze && el >= before:
			if err := rs.Pause(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = rs.Resume() })
			froze = true
		case froze && !resumed && el >= before+freeze:
			if err := rs.Resume(); err != nil {
				t.Fatal(err)
			}
			resumed = true
		}
		k := fmt.Sprintf(`"drill-%d"`, n)
		keys = append(keys, k)
		for i := range clients {
			wg.Add(1)
			go client(i, k)
		}
	}
	go func() { wg.Wait(); close(results) }()
	statuses := map[int]int{}
	maxAttempts := 0
	for r := range results {
		statuses[r.status]++
		maxAttempts = max(maxAttempts, r.attempts)
		if r.status != http.StatusCreated {
			t.Errorf("%s: a client ended with %d %q after %d attempts; want 201", r.key, r.status, r.body, r.attempts)
		}
	}
	select {
	case e := <-switched:
		t.Logf("switched %s → %s (%s) %v after the freeze", e.From, e.To, e.Reason, e.At.Sub(start.Add(before)))
	default:
		t.Error("the switcher never left the frozen Redis")
	}
	twice := 0
	mu.Lock()
	for _, k := range keys {
		if runs[k] != 1 {
			twice++
			t.Errorf("%s ran %d times; want 1", k, runs[k])
		}
	}
	mu.Unlock()
	for i, g := range gates {
		idemtest.Eventually(t, 20*time.Second, fmt.Sprintf("gate %d's pending outcomes written", i), func() (bool, error) { return g.Pending() == 0, nil })
	}
	running := 0
	for _, k := range keys {
		id, _ := idemhttp.KeyID(gates[0], "", k[1:len(k)-1])
		for _, store := range []string{"redis", "etcd"} {
			rec, _, ok, err := gates[0].Lookup(context.Background(), store, id)
			if err != nil {
				t.Fatalf("Lookup(%s) on %s: %v", k, store, err)
			}
			if ok && rec.State == idem.Running {
				running++
				t.Errorf("%s left running on %s", k, store)
			}
		}
	}
	t.Logf("%d keys × %d clients; final statuses %v; most attempts by one client %d; ran twice %d; left running %d",
		len(keys), clients, statuses, maxAttempts, twice, running)
}
