// Package zkcall bounds go-zookeeper requests, which take no context, by a
// context: the one way orthrus's ZooKeeper source and configuration tools
// wait for them.
package zkcall

import "context"

// Do runs f, a go-zookeeper request, and waits for it or ctx, when it
// returns ctx.Err(). A request abandoned here ends in the background when
// ZooKeeper answers or the connection gives it up; its goroutine owns
// nothing else.
func Do[T any](ctx context.Context, f func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := f()
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}
