package zksource_test

import (
	"context"
	"fmt"
	"time"

	gozk "github.com/go-zookeeper/zk"

	"github.com/orthrus-go/orthrus/engines/zk"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/switcher"
	"github.com/orthrus-go/orthrus/switcher/zksource"
)

func Example() {
	// zkAddr is the ZooKeeper started for these examples. Two engines in
	// one ensemble keep the example small; in production they are
	// different systems.
	primary, err := zk.New([]string{zkAddr}, zk.WithName("primary"), zk.WithPrefix("/example/primary"))
	if err != nil {
		fmt.Println(err)
		return
	}
	secondary, err := zk.New([]string{zkAddr}, zk.WithName("secondary"), zk.WithPrefix("/example/secondary"))
	if err != nil {
		_ = primary.Close()
		fmt.Println(err)
		return
	}

	// The source reads through a connection of its own, which the caller
	// owns and closes after the switcher.
	conn, _, err := gozk.Connect([]string{zkAddr}, 10*time.Second, gozk.WithLogInfo(false))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close()
	// Every process of the fleet watches the same node.
	src, err := zksource.New(conn, "/example/orthrus/active")
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
