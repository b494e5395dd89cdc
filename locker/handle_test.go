package locker

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// testGrant is a Grant that counts its releases.
type testGrant struct {
	token    uint64
	lost     chan struct{}
	releases atomic.Int32
}

func newTestGrant(token uint64) *testGrant {
	return &testGrant{token: token, lost: make(chan struct{})}
}

func (g *testGrant) Token() uint64         { return g.token }
func (g *testGrant) Engine() string        { return "test" }
func (g *testGrant) Lost() <-chan struct{} { return g.lost }
func (g *testGrant) Unlock() error {
	g.releases.Add(1)
	return nil
}

func (g *testGrant) ReleaseWithin(time.Duration, <-chan struct{}) error { return g.Unlock() }

// TestHandleOneAcquisitionAtATime: while one goroutine of an owner makes
// the outermost acquisition, TryLock reports false at once and LockCtx
// waits for it and then re-enters: take runs once, and the grant is
// released once, at the last Unlock.
func TestHandleOneAcquisitionAtATime(t *testing.T) {
	g := newTestGrant(7)
	var takes atomic.Int32
	started, proceed := make(chan struct{}), make(chan struct{})
	l := NewHandle("test", "n", func(ctx context.Context, _ bool) (Grant, error) {
		takes.Add(1)
		close(started)
		<-proceed
		return g, nil
	})
	first := make(chan error, 1)
	go func() { first <- l.Lock() }()
	<-started
	if ok, err := l.TryLock(); ok || err != nil {
		t.Errorf("TryLock() during another goroutine's acquisition = %v, %v; want false, nil", ok, err)
	}
	second := make(chan error, 1)
	go func() { second <- l.LockCtx(context.Background()) }()
	close(proceed)
	for _, c := range []chan error{first, second} {
		if err := <-c; err != nil {
			t.Fatalf("Lock() = %v", err)
		}
	}
	if n := takes.Load(); n != 1 {
		t.Errorf("take ran %d times; want 1 (the second Lock re-enters)", n)
	}
	if l.Token() != 7 || l.Engine() != "test" {
		t.Errorf("Token(), Engine() = %d, %q; want 7, test", l.Token(), l.Engine())
	}
	for i := range 2 {
		if err := l.Unlock(); err != nil {
			t.Fatalf("Unlock() #%d = %v", i+1, err)
		}
		if want := int32(i); g.releases.Load() != want {
			t.Errorf("after Unlock #%d the grant was released %d times; want %d", i+1, g.releases.Load(), want)
		}
	}
	if err := l.Unlock(); !errors.Is(err, ErrNotHeld) {
		t.Errorf("Unlock() without a hold = %v; want ErrNotHeld", err)
	}
}

// TestHandleWaitEndsWithCtx: a LockCtx waiting for another goroutine's
// acquisition returns ctx.Err() itself when ctx ends.
func TestHandleWaitEndsWithCtx(t *testing.T) {
	started, proceed := make(chan struct{}), make(chan struct{})
	l := NewHandle("test", "n", func(ctx context.Context, _ bool) (Grant, error) {
		close(started)
		<-proceed
		return nil, context.Canceled
	})
	first := make(chan error, 1)
	go func() { first <- l.Lock() }()
	<-started
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := l.LockCtx(ctx); err != context.Canceled {
		t.Errorf("LockCtx(cancelled) = %v; want context.Canceled", err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	if err := l.LockCtx(ctx); err != context.DeadlineExceeded {
		t.Errorf("LockCtx(1ms) while another goroutine acquires = %v; want context.DeadlineExceeded", err)
	}
	close(proceed)
	<-first
}

// TestTakeSkipsReentry: Take makes the outermost acquisition of a Handle
// that holds nothing without the Handle's own entry (a wrapper checked
// re-entry already), pins the grant in it, so that GrantOf sees it, and
// releasing the returned grant releases the Handle's.
func TestTakeSkipsReentry(t *testing.T) {
	g := newTestGrant(3)
	var takes atomic.Int32
	l := NewHandle("test", "n", func(context.Context, bool) (Grant, error) {
		takes.Add(1)
		return g, nil
	})
	got, err := Take(context.Background(), l, true)
	if got == nil || err != nil {
		t.Fatalf("Take() = %v, %v; want a grant", got, err)
	}
	if takes.Load() != 1 || got.Token() != 3 || GrantOf(l) != Grant(g) {
		t.Errorf("after Take: %d takes, Token %d, GrantOf %v; want 1, 3, the grant", takes.Load(), got.Token(), GrantOf(l))
	}
	if err := got.Unlock(); err != nil || g.releases.Load() != 1 {
		t.Errorf("Unlock() = %v with %d releases; want nil, 1", err, g.releases.Load())
	}
	if GrantOf(l) != nil {
		t.Errorf("GrantOf() after the release = %v; want nil", GrantOf(l))
	}
	close(g.lost)
	if _, err := Take(context.Background(), l, true); err != nil {
		t.Fatal(err)
	}
	if GrantOf(l) != nil {
		t.Errorf("GrantOf() of a lost hold = %v; want nil", GrantOf(l))
	}
	if err := l.Lock(); !errors.Is(err, ErrLockLost) {
		t.Errorf("Lock() re-entering a lost hold = %v; want ErrLockLost", err)
	}
}
