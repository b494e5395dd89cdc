package elect_test

import (
	"context"
	"fmt"

	"github.com/orthrus-go/orthrus/elect"
	"github.com/orthrus-go/orthrus/engines/mem"
)

// Two workers on two hosts campaign; the first leads until it resigns,
// then the other does. Observers read the leader and what it published.
func Example() {
	store, _ := mem.NewStore() // one simulated server for both hosts
	hostA, _ := mem.New(mem.WithStore(store), mem.WithName("host-a"))
	hostB, _ := mem.New(mem.WithStore(store), mem.WithName("host-b"))
	defer hostA.Close()
	defer hostB.Close()

	a, _ := elect.New(hostA, "billing", elect.WithValue("10.0.0.5:8080"))
	b, _ := elect.New(hostB, "billing", elect.WithValue("10.0.0.6:8080"))
	ctx := context.Background()

	lead, _ := a.Campaign(ctx)
	leader, _ := elect.CurrentLeader(ctx, hostB, "billing")
	fmt.Println("leader:", leader.Value)
	tokenA := a.Token()

	next := make(chan context.Context)
	go func() {
		l, _ := b.Campaign(ctx) // blocks while a leads
		next <- l
	}()
	_ = a.Resign()
	fmt.Println("a's leadership ended:", lead.Err() != nil)
	<-next
	leader, _ = elect.CurrentLeader(ctx, hostA, "billing")
	fmt.Println("leader:", leader.Value, "with a higher token:", b.Token() > tokenA)
	_ = b.Resign()
	// Output:
	// leader: 10.0.0.5:8080
	// a's leadership ended: true
	// leader: 10.0.0.6:8080 with a higher token: true
}
