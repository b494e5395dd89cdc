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

// redisAddr is the Redis server TestMain starts.

func ExampleMiddleware() {
	client := goredis.NewClient(&goredis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer client.Close()
	store, _ := idem.NewRedisStore(client, idem.WithPrefix("examples:http"))
	gate, _ := idem.New("payments-api", store)
	mw, err := idemhttp.Middleware(gate)
	if err != nil {
		fmt.Println(err)
		return
	}
	payments := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintln(w, "payment P-1 created")
	})
	srv := httptest.NewServer(mw(payments))
	defer srv.Close()

	send := func(body string) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/payments", strings.NewReader(body))
		req.Header.Set("Idempotency-Key", `"8e03978e-40d5-43e8-bc93-6894a57f9324"`)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		fmt.Printf("%d replayed=%q %s", resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), b)
	}
	send(`{"amount": 10}`)
	send(`{"amount": 10}`) // a retry: the response is replayed
	send(`{"amount": 99}`) // the key reused for another request
	// Output:
	// 201 replayed="" payment P-1 created
	// 201 replayed="true" payment P-1 created
	// 422 replayed="" {"detail":"this Idempotency-Key was used for a different request","status":422,"title":"Unprocessable Entity"}
}
