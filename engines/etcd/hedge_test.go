package etcd

import (
	"context"
	"github.com/orthrus-go/orthrus/internal/deadline"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// errDown is what an attempt gets at once from a member that cannot serve.
var errDown = status.Error(codes.Unavailable, "member down")

// answered returns f's error, or fails the test when f has not returned
// within a few seconds: f's context is then cancelled (a caller's
// context.Background() never would be) and f waited for.
func answered(t *testing.T, cancel context.CancelFunc, f func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-time.After(5 * time.Second):
		cancel()
		t.Fatalf("no answer within 5s with no attempt in flight and none left to send; %v once cancelled", <-done)
		return nil
	}
}

// TestCreateHedgedNoAttemptLeft: an attempt that fails at once may be
// followed by another after backoff(0), but the request timeout leaves
// less than backoff(0) for it (timeout-attempt < 50ms): createHedged must
// then return the attempt's error, not wait with nothing in flight.
func TestCreateHedgedNoAttemptLeft(t *testing.T) {
	e := bareEngine(time.Second, time.Second+backoff(0)-time.Nanosecond)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var attempts atomic.Int32
	err := answered(t, cancel, func() error {
		_, _, err := e.createHedged(ctx, func(context.Context) (*slot, *clientv3.TxnResponse, error) {
			attempts.Add(1)
			return nil, nil, errDown
		})
		return err
	})
	if err != errDown || attempts.Load() != 1 {
		t.Errorf("createHedged() = %v after %d attempts; want %v after 1", err, attempts.Load(), errDown)
	}
}

// TestHedgeNoAttemptLeft: attempts that fail at once use up the most hedge
// may send (timeout/attempt+1 = 3) long before the request timeout ends;
// hedge must then return the last error, not wait for the timeout.
func TestHedgeNoAttemptLeft(t *testing.T) {
	e := bareEngine(time.Minute, 2*time.Minute)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var sent int
	err := answered(t, cancel, func() error {
		var err error
		_, sent, err = hedge(ctx, e, func(context.Context) (struct{}, error) { return struct{}{}, errDown })
		return err
	})
	if err != errDown || sent != 3 {
		t.Errorf("hedge() = %v after %d attempts; want %v after 3", err, sent, errDown)
	}
}

// bareEngine is an Engine with only its attempt and request timeouts, for
// the hedging rules, which send nothing to etcd themselves.
func bareEngine(attempt, timeout time.Duration) *Engine {
	return &Engine{settings: settings{attempt: attempt, timeout: timeout},
		attempts: deadline.Shared{Timeout: attempt}, requests: deadline.Shared{Timeout: timeout}}
}
