package deadline

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type key struct{}

// TestBound: a request on behalf of context.Background shares one context
// that ends within the timeout; any other context keeps its values and
// cancellation, and its own deadline when that comes sooner.
func TestBound(t *testing.T) {
	const timeout = time.Minute
	s := &Shared{Timeout: timeout}
	defer s.Stop()

	start := time.Now()
	a, cancelA := s.Bound(context.Background())
	b, cancelB := s.Bound(context.Background())
	cancelA()
	cancelB()
	if a != b {
		t.Error("two requests on context.Background at once got two contexts; want one shared")
	}
	if d, ok := a.Deadline(); !ok || d.Before(start.Add(timeout-timeout/64)) || d.After(time.Now().Add(timeout)) {
		t.Errorf("shared deadline = %v, %v; want within %v from now", d, ok, timeout)
	}
	if a.Err() != nil {
		t.Errorf("a request's cancel ended the shared context: %v", a.Err())
	}

	soon, cancelSoon := context.WithTimeout(context.WithValue(context.Background(), key{}, 1), time.Second)
	defer cancelSoon()
	if c, cancel := s.Bound(soon); c != soon {
		cancel()
		t.Error("a context ending sooner than the timeout was given another; want itself")
	}

	later, cancelLater := context.WithTimeout(context.WithValue(context.Background(), key{}, 2), 2*timeout)
	c, cancel := s.Bound(later)
	if d, _ := c.Deadline(); d.After(time.Now().Add(timeout)) || c.Value(key{}) != 2 {
		t.Errorf("Bound(ctx ending in %v) = deadline %v, value %v; want within %v, value 2", 2*timeout, d, c.Value(key{}), timeout)
	}
	cancelLater()
	if c.Err() == nil {
		t.Error("the bounded context outlived its parent")
	}
	cancel()

	values := context.WithValue(context.Background(), key{}, 3)
	c, cancel = s.Bound(values)
	defer cancel()
	if _, ok := c.Deadline(); !ok || c.Value(key{}) != 3 {
		t.Errorf("Bound(ctx with a value) lost its value or got no deadline: %v", c.Value(key{}))
	}
}
