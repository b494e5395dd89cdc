package redis

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/orthrus-go/orthrus/internal/testserver"
)

// incrScript answers each call with a value of its own.
var incrScript = scriptOf(`return redis.call('incr', KEYS[1])`)

// pipelines records the size of every pipeline a client sends, and
// signals a single command sent on processing (if not nil and not full).
type pipelines struct {
	mu         sync.Mutex
	sizes      []int
	processing chan struct{}
}

func (*pipelines) DialHook(next goredis.DialHook) goredis.DialHook { return next }
func (p *pipelines) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		select {
		case p.processing <- struct{}{}:
		default: // nil, or signalled already
		}
		return next(ctx, cmd)
	}
}
func (p *pipelines) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		p.mu.Lock()
		p.sizes = append(p.sizes, len(cmds))
		p.mu.Unlock()
		return next(ctx, cmds)
	}
}

func incr(ctx context.Context, b *batcher, key string) (int64, error) {
	return b.run(ctx, incrScript, []any{"evalsha", incrScript.sha, 1, key})
}

// Concurrent calls share pipelines, and each gets its own answer, also from
// a server that lacks the script (sent again as EVAL).
func TestBatcherPipelinesConcurrentCalls(t *testing.T) {
	srv := testserver.Redis(t)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer c.Close()
	seen := &pipelines{}
	c.AddHook(seen)
	if err := c.ScriptFlush(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	b := &batcher{client: c, lanes: 2} // 8 callers in 2 lanes: some must queue
	const callers, calls = 8, 200
	var (
		mu  sync.Mutex
		got []int64
		wg  sync.WaitGroup
	)
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range calls {
				v, err := incr(context.Background(), b, "counter")
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				got = append(got, v)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	slices.Sort(got)
	for i, v := range got {
		if v != int64(i+1) {
			t.Fatalf("answers, sorted, have %d at %d; want each of 1..%d once", v, i, callers*calls)
		}
	}
	seen.mu.Lock()
	defer seen.mu.Unlock()
	if len(seen.sizes) == 0 || slices.Max(seen.sizes) < 2 {
		t.Errorf("pipelines sent: %v; want some of more than one call", seen.sizes)
	}
}

// A call queued behind one the server does not answer leaves at its
// deadline, and is never sent.
func TestBatcherQueuedCallLeavesAtDeadline(t *testing.T) {
	srv := testserver.Redis(t)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), ReadTimeout: 2 * time.Second})
	defer c.Close()
	b := &batcher{client: c, lanes: 1}
	if _, err := incr(context.Background(), b, "warm"); err != nil { // connection up, script loaded
		t.Fatal(err)
	}
	sending := &pipelines{processing: make(chan struct{}, 1)}
	c.AddHook(sending)
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	first := make(chan error, 1)
	go func() {
		_, err := incr(context.Background(), b, "counter")
		first <- err
	}()
	<-sending.processing // in flight: the next call queues
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := incr(ctx, b, "counter")
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > time.Second {
		t.Errorf("queued call = %v after %v; want context.DeadlineExceeded at its 100ms deadline", err, time.Since(start))
	}
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	if err := <-first; err != nil {
		t.Logf("the call in flight during the pause: %v", err)
	}
	if n, err := c.Get(context.Background(), "counter").Int(); err != nil || n > 1 {
		t.Errorf("counter = %d, %v; want at most 1: the call that left was sent", n, err)
	}
}

// Up to lanes calls are in flight at once, each on a connection of its
// own: a call does not wait for the round trip of the one before it.
func TestBatcherLanesInFlightTogether(t *testing.T) {
	srv, b, sent := frozenBatcher(t, &batcher{lanes: 2})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	done := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := incr(ctx, b, "counter")
			done <- err
		}()
	}
	for i := range 2 {
		select {
		case <-sent.processing:
		case <-time.After(2 * time.Second):
			t.Fatalf("%d of 2 calls sent while the server is frozen; want both in flight", i)
		}
	}
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}

// With alone (a client that honours deadlines), a release takes a lane of
// its own past the limit: it is sent while another call holds the only
// lane, not queued behind it, so that it ends by its own deadline.
func TestBatcherReleaseGoesAlone(t *testing.T) {
	srv, b, sent := frozenBatcher(t, &batcher{lanes: 1, alone: true})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	done := make(chan error, 2)
	go func() {
		_, err := incr(ctx, b, "counter")
		done <- err
	}()
	<-sent.processing // the only lane is taken
	go func() {
		_, err := b.release(ctx, incrScript, []any{"evalsha", incrScript.sha, 1, "counter"})
		done <- err
	}()
	select {
	case <-sent.processing:
	case <-time.After(2 * time.Second):
		t.Fatal("the release was not sent while another call held the only lane; want it alone in a lane of its own")
	}
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}

// frozenBatcher gives b a client (ContextTimeoutEnabled) of a new server,
// warms it up, and freezes the server; sent signals each command sent
// after that, up to two unread.
func frozenBatcher(t *testing.T, b *batcher) (*testserver.Server, *batcher, *pipelines) {
	t.Helper()
	srv := testserver.Redis(t)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	b.client = c
	if _, err := incr(context.Background(), b, "warm"); err != nil {
		t.Fatal(err)
	}
	sent := &pipelines{processing: make(chan struct{}, 2)}
	c.AddHook(sent)
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Resume() })
	return srv, b, sent
}
