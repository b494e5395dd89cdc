package zkcall

import (
	"context"
	"errors"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestDo(t *testing.T) {
	if v, err := Do(context.Background(), func() (int, error) { return 7, nil }); v != 7 || err != nil {
		t.Errorf("Do() = %v, %v; want 7, nil", v, err)
	}
	release := make(chan struct{})
	defer close(release)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Do(ctx, func() (int, error) { <-release; return 0, errors.New("late") }); err != context.Canceled {
		t.Errorf("Do(cancelled) = %v; want context.Canceled while the request hangs", err)
	}
}
