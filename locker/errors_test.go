package locker_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/orthrus-go/orthrus/locker"
)

func TestEngineError(t *testing.T) {
	cause := errors.New("dial tcp 127.0.0.1:1: connect: connection refused")
	var err error = &locker.EngineError{Engine: "redis", Op: "acquire", Name: "orders/42",
		Classes: []error{locker.ErrUnavailable, locker.ErrRefused}, Err: cause}
	err = fmt.Errorf("switcher: %w", err)
	for _, want := range []error{locker.ErrUnavailable, locker.ErrRefused, cause} {
		if !errors.Is(err, want) {
			t.Errorf("errors.Is(%v, %v) = false; want true", err, want)
		}
	}
	if errors.Is(err, locker.ErrLockLost) {
		t.Errorf("errors.Is(%v, ErrLockLost) = true; want false", err)
	}
	var ee *locker.EngineError
	if !errors.As(err, &ee) || ee.Op != "acquire" || ee.Name != "orders/42" {
		t.Errorf("errors.As(%v) = %v, %+v; want the acquire of orders/42", err, ee != nil, ee)
	}
	const want = `switcher: redis: acquire "orders/42": locker: engine unavailable: locker: engine refused the connection: dial tcp 127.0.0.1:1: connect: connection refused`
	if got := err.Error(); got != want {
		t.Errorf("Error() = %q\nwant %q", got, want)
	}
	// A ping names no lock, and says none.
	ping := &locker.EngineError{Engine: "postgres", Op: "ping", Classes: []error{locker.ErrUnavailable}}
	if got, want := ping.Error(), "postgres: ping: locker: engine unavailable"; got != want {
		t.Errorf("Error() = %q; want %q", got, want)
	}
}
