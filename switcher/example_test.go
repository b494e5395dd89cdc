package switcher_test

import (
	"fmt"
	"log"

	goredis "github.com/redis/go-redis/v9"

	"github.com/orthrus-go/orthrus/engines/redis"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/switcher"
)

// exampleEngine is a Redis engine on addr for the examples.
func exampleEngine(name, addr string) (*redis.Engine, *goredis.Client) {
	client := goredis.NewClient(&goredis.Options{Addr: addr})
	engine, err := redis.New(client, redis.WithName(name), redis.WithPrefix("switcher-example"))
	if err != nil {
		log.Fatal(err)
	}
	return engine, client
}

func ExampleNew() {
	primary, pc := exampleEngine("redis-main", primaryAddr)
	defer pc.Close()
	secondary, sc := exampleEngine("redis-backup", secondaryAddr)
	defer sc.Close()

	sw, err := switcher.New([]locker.Engine{primary, secondary},
		switcher.OnSwitch(func(ev switcher.Event) {
			fmt.Printf("switched %s -> %s (%s)\n", ev.From, ev.To, ev.Reason)
		}))
	if err != nil {
		log.Fatal(err)
	}
	defer sw.Close() // closes the engines too

	l, _ := sw.NewLocker("orders/42")
	if err := l.Lock(); err != nil {
		log.Fatal(err)
	}
	fmt.Println("held on", l.Engine())
	_ = l.Unlock()
	// Output: held on redis-main
}

// A hold stays on the engine that granted it; new owners go to the new
// current engine, and their tokens are higher.
func ExampleSwitcher_SwitchEngine() {
	primary, pc := exampleEngine("redis-main", primaryAddr)
	defer pc.Close()
	secondary, sc := exampleEngine("redis-backup", secondaryAddr)
	defer sc.Close()
	sw, _ := switcher.New([]locker.Engine{primary, secondary})
	defer sw.Close()

	old, _ := sw.NewLocker("report")
	_ = old.Lock()
	next, err := sw.SwitchEngine()
	fmt.Println("current:", next, err)

	fresh, _ := sw.NewLocker("report")
	_ = fresh.Lock()
	fmt.Println("old hold on", old.Engine(), "- new hold on", fresh.Engine())
	fmt.Println("new token is higher:", fresh.Token() > old.Token())
	_ = old.Unlock() // released on redis-main, where it was granted
	_ = fresh.Unlock()
	// Output:
	// current: redis-backup <nil>
	// old hold on redis-main - new hold on redis-backup
	// new token is higher: true
}

func ExampleSwitcher_States() {
	primary, pc := exampleEngine("redis-main", primaryAddr)
	defer pc.Close()
	secondary, sc := exampleEngine("redis-backup", secondaryAddr)
	defer sc.Close()
	sw, _ := switcher.New([]locker.Engine{primary, secondary})
	defer sw.Close()
	_, _ = sw.SwitchEngineTo("redis-backup")
	for _, st := range sw.States() {
		fmt.Println(st.Name, "current:", st.Current, "breaker:", st.Breaker)
	}
	// Output:
	// redis-main current: false breaker: closed
	// redis-backup current: true breaker: closed
}

// A fleet that must never split on one process's bad link (the default,
// spelled out), and that moves only when two processes see its engine
// down. With a shared source that lists the fleet (etcdsource, zksource),
// a process alone in seeing the primary down waits for it rather than
// granting on the secondary.
func ExampleWithIsolation() {
	primary, pc := exampleEngine("redis-main", primaryAddr)
	defer pc.Close()
	secondary, sc := exampleEngine("redis-backup", secondaryAddr)
	defer sc.Close()

	sw, err := switcher.New([]locker.Engine{primary, secondary},
		switcher.WithName("orders-fleet"), // also names the epoch record on each engine
		switcher.WithQuorum(2),
		switcher.WithIsolation(switcher.IsolationWait))
	if err != nil {
		log.Fatal(err)
	}
	defer sw.Close()

	l, _ := sw.NewLocker("orders/43")
	if err := l.Lock(); err != nil {
		log.Fatal(err)
	}
	defer l.Unlock()
	fmt.Println("granted on", l.Engine())
	// Output: granted on redis-main
}
