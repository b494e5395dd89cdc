package idemhttp_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	goredis "github.com/redis/go-redis/v9"

	"github.com/orthrus-go/orthrus/idem"
	"github.com/orthrus-go/orthrus/idem/idemhttp"
)

// A fingerprint over chosen fields, a validation error that is not
// recorded, and a replay hook.
func ExampleJSONFields() {
	client := goredis.NewClient(&goredis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer client.Close()
	store, _ := idem.NewRedisStore(client, idem.WithPrefix("examples:http-options"))
	gate, _ := idem.New("orders-api", store)
	defer gate.Close()
	mw, err := idemhttp.Middleware(gate,
		idemhttp.WithFingerprint(idemhttp.JSONFields("amount", "currency")), // "sent_at" may change on a retry
		idemhttp.WithOnReplay(func(w http.ResponseWriter, _ *http.Request, d *idem.Duplicate) {
			w.Header().Set("X-Replayed-From", d.Store)
		}))
	if err != nil {
		fmt.Println(err)
		return
	}
	orders := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if !strings.Contains(string(body), `"currency"`) {
			http.Error(w, "currency is required", http.StatusUnprocessableEntity) // before any side effect: not recorded
			return
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, "order O-1 created")
	})
	srv := httptest.NewServer(mw(orders))
	defer srv.Close()

	send := func(body string) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/orders", strings.NewReader(body))
		req.Header.Set(idemhttp.Header, `"order-key-1"`)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		fmt.Printf("%d %q from=%q\n", resp.StatusCode, strings.TrimSpace(string(b)), resp.Header.Get("X-Replayed-From"))
	}
	send(`{"amount": 10, "sent_at": 1}`)                    // invalid: 422, not recorded
	send(`{"amount": 10, "currency": "EUR", "sent_at": 2}`) // fixed, same key: runs
	send(`{"sent_at": 3, "currency": "EUR", "amount": 10}`) // a retry: replayed
	// Output:
	// 422 "currency is required" from=""
	// 201 "order O-1 created" from=""
	// 201 "order O-1 created" from="redis"
}
