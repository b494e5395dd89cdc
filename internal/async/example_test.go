package async_test

import (
	"context"
	"fmt"
	"time"

	"github.com/orthrus-go/orthrus/internal/async"
)

// A request whose caller gives up before the answer: the worker that
// delivers the late answer undoes what it did.
func Example() {
	pool := async.NewPool()
	answer := make(chan string) // the server's slow answer

	p := async.NewPending[string]()
	pool.Go(func(context.Context) {
		v := <-answer
		if !p.Deliver(v, nil) {
			fmt.Println("nobody waits: undo", v)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	_, err := p.Wait(ctx)
	fmt.Println("caller:", err)

	answer <- "lock granted"
	_ = pool.Close(context.Background()) // waits for the undo
	// Output:
	// caller: context deadline exceeded
	// nobody waits: undo lock granted
}
