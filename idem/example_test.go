package idem_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	gozk "github.com/go-zookeeper/zk"
	goredis "github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/orthrus-go/orthrus/idem"
)

// redisAddr, etcdAddr and zkAddr are the servers TestMain starts.

type payment struct {
	Order  string `json:"order"`
	Amount int    `json:"amount"`
}

func ExampleGate_Begin() {
	client := goredis.NewClient(&goredis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer client.Close()
	store, err := idem.NewRedisStore(client, idem.WithPrefix("examples:payments"))
	if err != nil {
		fmt.Println(err)
		return
	}
	gate, err := idem.New("billing", store, idem.WithExpiry(30*time.Second), idem.WithRetention(time.Hour))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer gate.Close()
	ctx := context.Background()
	pay := func(p payment) {
		tk, dup, err := gate.Begin(ctx, p)
		switch {
		case err != nil:
			fmt.Println("refused:", err)
		case dup != nil:
			fmt.Printf("duplicate of a %s payment: %s\n", dup.State, dup.Result)
		default:
			receipt := "receipt-for-" + p.Order // the operation
			if err := tk.Succeed(context.WithoutCancel(ctx), []byte(receipt)); err != nil {
				fmt.Println(err)
				return
			}
			fmt.Println("paid:", receipt)
		}
	}
	pay(payment{Order: "A-17", Amount: 1200})
	pay(payment{Amount: 1200, Order: "A-17"}) // a retry: same content
	// Output:
	// paid: receipt-for-A-17
	// duplicate of a succeeded payment: receipt-for-A-17
}

func ExampleTicket_Done_failure() {
	client := goredis.NewClient(&goredis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer client.Close()
	store, _ := idem.NewRedisStore(client, idem.WithPrefix("examples:failures"))
	gate, _ := idem.New("billing", store)
	ctx := context.Background()

	tk, _, _ := gate.Begin(ctx, "order-99")
	_, dup, _ := gate.Begin(ctx, "order-99") // while the first attempt runs
	fmt.Println("concurrent submission:", dup.State)
	fmt.Println(tk.Done(ctx, errors.New("card declined"))) // failure: the record goes
	tk, _, _ = gate.Begin(ctx, "order-99")                 // so the retry runs at once
	fmt.Println("retry runs:", tk != nil)
	fmt.Println(tk.Done(ctx, nil))
	// Output:
	// concurrent submission: running
	// <nil>
	// retry runs: true
	// <nil>
}

func ExampleNewSwitched() {
	rc := goredis.NewClient(&goredis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer rc.Close()
	ec, err := clientv3.New(clientv3.Config{Endpoints: []string{etcdAddr}, DialTimeout: time.Second})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ec.Close()
	// Name each store as its engine is named in the switcher.
	rs, _ := idem.NewRedisStore(rc, idem.WithName("redis-main"), idem.WithPrefix("examples:switched"))
	es, _ := idem.NewEtcdStore(ec, idem.WithName("etcd-backup"), idem.WithPrefix("examples/switched"))

	current := "redis-main" // in a service: sw.Current, the switcher's method
	gate, err := idem.NewSwitched("billing", func() string { return current }, []idem.Store{rs, es},
		idem.WithCheckPrevious(200*time.Millisecond))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer gate.Close() // stops the background writes (the copies a switch makes)
	ctx := context.Background()
	tk, _, _ := gate.Begin(ctx, "order-7")
	current = "etcd-backup" // the switch
	fmt.Println("ticket pinned to", tk.Store(), tk.Done(ctx, nil))
	_, dup, _ := gate.Begin(ctx, "order-7")
	fmt.Println("duplicate found on", dup.Store)
	tk, _, _ = gate.Begin(ctx, "order-8")
	fmt.Println("new operation on", tk.Store(), tk.Done(ctx, nil))
	// Output:
	// ticket pinned to redis-main <nil>
	// duplicate found on redis-main
	// new operation on etcd-backup <nil>
}

// quietZK silences the ZooKeeper client's log.
type quietZK struct{}

func (quietZK) Printf(string, ...any) {}

func ExampleNewZKStore() {
	conn, _, err := gozk.Connect([]string{zkAddr}, 5*time.Second, gozk.WithLogger(quietZK{}))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close()
	// TTL nodes need extendedTypesEnabled=true on the servers; otherwise
	// add idem.WithoutTTLNodes().
	store, err := idem.NewZKStore(conn, nil, idem.WithPrefix("/examples/idem"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer store.Close()
	gate, _ := idem.New("shipping", store, idem.WithExpiry(time.Minute))
	ctx := context.Background()
	content := map[string]any{"parcel": "P-1", "carrier": "acme"}
	tk, _, err := gate.Begin(ctx, content)
	if err != nil {
		fmt.Println(err)
		return
	}
	_, dup, _ := gate.Begin(ctx, content)
	fmt.Println("second submission:", dup.State)
	fmt.Println(tk.Done(ctx, nil))
	// Output:
	// second submission: running
	// <nil>
}

func ExampleIdentify() {
	a, _ := idem.Identify("billing", map[string]any{"order": "A-17", "amount": 1200})
	b, _ := idem.Identify("billing", payment{Order: "A-17", Amount: 1200})
	c, _ := idem.Identify("shipping", payment{Order: "A-17", Amount: 1200})
	fmt.Println(a == b, a == c)
	// Output: true false
}
