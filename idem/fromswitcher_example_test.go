package idem_test

import (
	"context"
	"fmt"
	"time"

	goredis "github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/orthrus-go/orthrus/engines/etcd"
	"github.com/orthrus-go/orthrus/engines/redis"
	"github.com/orthrus-go/orthrus/idem"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/switcher"
)

// A gate built on a switcher's own engines: nothing is dialled again, and
// tickets stay on the engine they began on across a switch.
func ExampleFromSwitcher() {
	rc := goredis.NewClient(&goredis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer rc.Close()
	ec, err := clientv3.New(clientv3.Config{Endpoints: []string{etcdAddr}, DialTimeout: time.Second})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ec.Close()
	re, _ := redis.New(rc, redis.WithName("redis-main"))
	ee, _ := etcd.New(ec, etcd.WithName("etcd-backup"))
	sw, err := switcher.New([]locker.Engine{re, ee}) // with config: sw, err := config.Open(ctx, cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sw.Close()

	gate, err := idem.FromSwitcher(sw, "example-fromswitcher")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer gate.Close() // stops the background recording of pending outcomes

	ctx := context.Background()
	tk, _, err := gate.Begin(ctx, "invoice-7")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("began on", tk.Store())
	if _, err := sw.SwitchEngineTo("etcd-backup"); err != nil {
		fmt.Println(err)
		return
	}
	// The ticket reports to the engine it began on, after the switch.
	if err := tk.Succeed(context.WithoutCancel(ctx), []byte("sent")); err != nil {
		fmt.Println(err)
		return
	}
	// A duplicate goes to the new engine, and the gate looks on the
	// previous one too (WithCheckPrevious, on by default here).
	_, dup, _ := gate.Begin(ctx, "invoice-7")
	fmt.Printf("duplicate: %s on %s, result %q\n", dup.State, dup.Store, dup.Result)
	tk, _, _ = gate.Begin(ctx, "invoice-8")
	fmt.Println("a new operation began on", tk.Store())
	_ = tk.Done(ctx, nil)
	// Output:
	// began on redis-main
	// duplicate: succeeded on redis-main, result "sent"
	// a new operation began on etcd-backup
}
