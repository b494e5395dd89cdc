package etcdsource_test

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/orthrus-go/orthrus/engines/etcd"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/switcher"
	"github.com/orthrus-go/orthrus/switcher/etcdsource"
)

func Example() {
	// endpoint is the etcd started for these examples. Two engines in one
	// etcd keep the example small; in production they are different
	// systems.
	client, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, Logger: zap.NewNop()})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer client.Close() // last: after the switcher
	primary, _ := etcd.New(client, etcd.WithName("primary"), etcd.WithPrefix("example/primary"))
	secondary, _ := etcd.New(client, etcd.WithName("secondary"), etcd.WithPrefix("example/secondary"))

	// Every process of the fleet watches the same key.
	src, err := etcdsource.New(client, "/example/orthrus/active")
	if err != nil {
		fmt.Println(err)
		return
	}
	switched := make(chan switcher.Event, 1)
	sw, err := switcher.New([]locker.Engine{primary, secondary},
		switcher.WithSource(src),
		switcher.OnSwitch(func(ev switcher.Event) { switched <- ev }),
	)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sw.Close() // stops the watch and closes both engines

	// One write moves every process's new acquisitions to the secondary.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := src.Set(ctx, "secondary"); err != nil {
		fmt.Println(err)
		return
	}
	select {
	case ev := <-switched:
		fmt.Println(ev.From, "->", ev.To, "by", ev.Reason)
	case <-ctx.Done():
		fmt.Println("no switch")
	}
	fmt.Println("current:", sw.Current())
	// Output:
	// primary -> secondary by source
	// current: secondary
}
