package driver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/locker"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestValidateName(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"a", true},
		{"orders/42", true},
		{"ünï cødé {x}", true},
		{strings.Repeat("x", MaxNameLen), true},
		{"", false},
		{strings.Repeat("x", MaxNameLen+1), false},
		{"\xff", false},
		{"a\x00b", false},
	} {
		err := ValidateName(tc.name)
		if tc.ok != (err == nil) || (err != nil && !errors.Is(err, locker.ErrInvalidName)) {
			t.Errorf("ValidateName(%.20q) = %v; want ok=%v", tc.name, err, tc.ok)
		}
	}
}

func TestResolve(t *testing.T) {
	s, err := Resolve()
	if err != nil || s.TTL != DefaultTTL || !s.Renew || s.ReleaseTimeout != DefaultReleaseTimeout || s.Owner == "" {
		t.Fatalf("Resolve() = %+v, %v; want the defaults with an owner", s, err)
	}
	s2, _ := Resolve()
	if s.Owner == s2.Owner {
		t.Errorf("two Resolve() calls gave the same owner %q; want unique owners", s.Owner)
	}
	s, err = Resolve(locker.WithTTL(time.Second), locker.WithLease(2*time.Second), locker.WithOwner("job-7"))
	if err != nil || s.TTL != 2*time.Second || s.Renew || s.Owner != "job-7" {
		t.Errorf("Resolve(WithTTL, WithLease, WithOwner) = %+v, %v; want the lease to win", s, err)
	}
	if _, err := Resolve(locker.WithOwner(strings.Repeat("o", 257) /* over the limit of 256 */)); !errors.Is(err, locker.ErrInvalidArgument) {
		t.Errorf("Resolve(locker.WithOwner(too long)) = %v; want locker.ErrInvalidArgument", err)
	}
}

// recorder is a Renewer that records each batch and answers with result.
type recorder struct {
	mu      sync.Mutex
	batches [][]*Hold
	result  func(h *Hold) error
	called  chan struct{}
}

func newRecorder(result func(*Hold) error) *recorder {
	return &recorder{result: result, called: make(chan struct{}, 100)}
}

func (r *recorder) Renew(_ context.Context, hs []*Hold) []error {
	r.mu.Lock()
	r.batches = append(r.batches, append([]*Hold(nil), hs...))
	r.mu.Unlock()
	errs := make([]error, len(hs))
	for i, h := range hs {
		errs[i] = r.result(h)
	}
	select {
	case r.called <- struct{}{}:
	default:
	}
	return errs
}

func (r *recorder) batchSizes() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	var sizes []int
	for _, b := range r.batches {
		sizes = append(sizes, len(b))
	}
	return sizes
}

func newHold(name string, ttl time.Duration, renew bool) *Hold {
	return &Hold{Name: name, TTL: ttl, Renew: renew, ReleaseTimeout: time.Second, lost: make(chan struct{})}
}

func waitLost(t *testing.T, h *Hold, within time.Duration) {
	t.Helper()
	select {
	case <-h.Lost():
	case <-time.After(within):
		t.Fatalf("hold %q not lost within %v", h.Name, within)
	}
}

func TestSchedulerBatchesHoldsDueTogether(t *testing.T) {
	r := newRecorder(func(*Hold) error { return nil })
	s := newScheduler(r, func(*Hold) {}, slog.Default())
	defer s.close()
	const n, ttl = 50, 300 * time.Millisecond
	now := time.Now()
	for i := 0; i < n; i++ {
		// Granted over 20ms: all within a quarter of an interval of each
		// other.
		s.add(newHold("h", ttl, true), now.Add(time.Duration(i)*400*time.Microsecond))
	}
	for i := 0; i < 3; i++ {
		<-r.called
	}
	sizes := r.batchSizes()
	if sizes[0] != n || sizes[1] != n {
		t.Errorf("renewal batches = %v; want every batch to carry all %d holds", sizes, n)
	}
}

func TestSchedulerMarksLost(t *testing.T) {
	gone := errors.New("gone")
	r := newRecorder(func(h *Hold) error {
		switch h.Name {
		case "vanished":
			return locker.ErrLockLost
		case "unreachable":
			return gone
		}
		return nil
	})
	s := newScheduler(r, func(*Hold) {}, slog.Default())
	defer s.close()
	const ttl = 300 * time.Millisecond
	vanished, unreachable, fine := newHold("vanished", ttl, true), newHold("unreachable", ttl, true), newHold("fine", ttl, true)
	start := time.Now()
	for _, h := range []*Hold{vanished, unreachable, fine} {
		s.add(h, start)
	}
	// Generous bounds: on a loaded machine the scheduler runs late; the
	// point is that both are lost, and not before the TTL.
	waitLost(t, vanished, 10*ttl)
	waitLost(t, unreachable, 10*ttl)
	if d := time.Since(start); d < ttl {
		t.Errorf("a hold whose renewals failed was declared lost after %v; want not before its TTL %v", d, ttl)
	}
	// The healthy hold outlives several TTLs.
	time.Sleep(ttl)
	select {
	case <-fine.Lost():
		t.Errorf("a hold renewed fine was declared lost")
	default:
	}
}

func TestSchedulerStopsRenewingRemovedHolds(t *testing.T) {
	var mu sync.Mutex
	renewed := map[string]int{}
	r := newRecorder(func(h *Hold) error {
		mu.Lock()
		renewed[h.Name]++
		mu.Unlock()
		return nil
	})
	s := newScheduler(r, func(*Hold) {}, slog.Default())
	defer s.close()
	const ttl = 150 * time.Millisecond
	kept, removed := newHold("kept", ttl, true), newHold("removed", ttl, true)
	s.add(kept, time.Now())
	s.add(removed, time.Now())
	s.remove(removed)
	for i := 0; i < 3; i++ {
		<-r.called
	}
	mu.Lock()
	defer mu.Unlock()
	if renewed["removed"] != 0 || renewed["kept"] < 3 {
		t.Errorf("renewals = %v; want none for the removed hold and 3+ for the kept one", renewed)
	}
}

func TestSchedulerEndsFixedLeases(t *testing.T) {
	expired := make(chan *Hold, 1)
	s := newScheduler(nil, func(h *Hold) { expired <- h }, slog.Default())
	defer s.close()
	const d = 100 * time.Millisecond
	h := newHold("lease", d, false)
	start := time.Now()
	s.add(h, start)
	select {
	case got := <-expired:
		if got != h || time.Since(start) < d {
			t.Errorf("expired %q after %v; want %q after at least %v", got.Name, time.Since(start), h.Name, d)
		}
	case <-time.After(10 * d):
		t.Fatalf("lease of %v not ended after %v", d, 10*d)
	}
}

func TestSchedulerCutsChunks(t *testing.T) {
	var mu sync.Mutex
	renewed := map[*Hold]int{}
	r := newRecorder(func(h *Hold) error {
		mu.Lock()
		renewed[h]++
		mu.Unlock()
		return nil
	})
	const n, chunk, ttl = 1000, 64, 600 * time.Millisecond
	s := startScheduler(r, func(*Hold) {}, slog.Default(), chunk, 3)
	defer s.close()
	now := time.Now()
	for i := 0; i < n; i++ {
		s.add(newHold("h", ttl, true), now)
	}
	// Every hold renewed at least twice: at least 2n/chunk calls.
	for calls := 0; calls < 2*n/chunk+2; calls++ {
		<-r.called
	}
	// A late renewal (a slow machine) may take eight chunks at once.
	const most = chunk * lateChunk / renewChunk
	for i, size := range r.batchSizes() {
		if size > most {
			t.Fatalf("Renew call %d carried %d holds; want at most %d", i, size, most)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(renewed) != n {
		t.Errorf("%d holds renewed; want all %d", len(renewed), n)
	}
}

// concurrency records the most Renew calls in flight at once; each call
// takes a little while.
type concurrency struct {
	mu        sync.Mutex
	now, most int
	calls     chan struct{}
}

func (c *concurrency) Renew(_ context.Context, hs []*Hold) []error {
	c.mu.Lock()
	c.now++
	c.most = max(c.most, c.now)
	c.mu.Unlock()
	time.Sleep(2 * time.Millisecond) // the call's round trip
	c.mu.Lock()
	c.now--
	c.mu.Unlock()
	select {
	case c.calls <- struct{}{}:
	default:
	}
	return make([]error, len(hs))
}

// Holds renewed before they are due go one chunk at a time, so that an
// acquisition finds at most one renewal ahead of it on the server.
func TestSchedulerEarlyChunksOneAtATime(t *testing.T) {
	const n, ttl = 20, 30 * time.Second
	c := &concurrency{calls: make(chan struct{}, n)}
	s := startScheduler(c, func(*Hold) {}, slog.Default(), 1, 4)
	defer s.close()
	// Granted so long ago that they are ready now, and due 2s from now:
	// 20 calls of 2ms take far less.
	granted := time.Now().Add(2*time.Second - ttl/3)
	for range n {
		s.add(newHold("h", ttl, true), granted)
	}
	for range n {
		<-c.calls
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.most != 1 {
		t.Errorf("%d early Renew calls in flight at once; want 1", c.most)
	}
}

// slowRenewer blocks the renewal of the hold named slow until its context
// ends, and renews every other hold at once.
type slowRenewer struct {
	mu      sync.Mutex
	fast    int
	blocked chan struct{} // a call for slow has begun
}

func (r *slowRenewer) Renew(ctx context.Context, hs []*Hold) []error {
	errs := make([]error, len(hs))
	for i, h := range hs {
		if h.Name == "slow" {
			select {
			case r.blocked <- struct{}{}:
			default:
			}
			<-ctx.Done()
			errs[i] = ctx.Err()
			continue
		}
		r.mu.Lock()
		r.fast++
		r.mu.Unlock()
	}
	return errs
}

func (r *slowRenewer) renewedFast() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.fast
}

func TestSchedulerSlowChunkDoesNotDelayOthers(t *testing.T) {
	r := &slowRenewer{blocked: make(chan struct{}, 1)}
	s := startScheduler(r, func(*Hold) {}, slog.Default(), 1, 2)
	defer s.close()
	const ttl = 300 * time.Millisecond
	slow, fast := newHold("slow", ttl, true), newHold("fast", ttl, true)
	start := time.Now()
	s.add(slow, start)
	s.add(fast, start)
	// The slow hold's renewals never answer: it is lost at its deadline,
	// while the other is renewed on time throughout.
	waitLost(t, slow, 3*ttl)
	<-r.blocked
	if d := time.Since(start); d < ttl {
		t.Errorf("slow hold lost after %v; want not before its TTL %v", d, ttl)
	}
	if got := r.renewedFast(); got < 2 {
		t.Errorf("fast hold renewed %d times while the other chunk hung; want 2 or more", got)
	}
	select {
	case <-fast.Lost():
		t.Errorf("fast hold lost while another chunk hung")
	default:
	}
}

// logSink is a slog handler that sends each record's message.
type logSink struct{ msgs chan string }

func (l logSink) Enabled(context.Context, slog.Level) bool { return true }
func (l logSink) Handle(_ context.Context, r slog.Record) error {
	select {
	case l.msgs <- r.Message:
	default:
	}
	return nil
}
func (l logSink) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l logSink) WithGroup(string) slog.Handler      { return l }

// lagRenewer takes delay per hold, like a server that cannot keep up.
type lagRenewer struct{ delay time.Duration }

func (r lagRenewer) Renew(ctx context.Context, hs []*Hold) []error {
	t := time.NewTimer(r.delay * time.Duration(len(hs)))
	defer t.Stop()
	select {
	case <-t.C:
		return make([]error, len(hs))
	case <-ctx.Done():
		errs := make([]error, len(hs))
		for i := range errs {
			errs[i] = ctx.Err()
		}
		return errs
	}
}

func TestSchedulerWarnsWhenBehind(t *testing.T) {
	sink := logSink{msgs: make(chan string, 1000)}
	// One worker, 20ms a hold: 40 holds need 800ms per 100ms interval.
	s := startScheduler(lagRenewer{delay: 20 * time.Millisecond}, func(*Hold) {}, slog.New(sink), 1, 1)
	defer s.close()
	const n, ttl = 40, 300 * time.Millisecond
	holds := make([]*Hold, n)
	now := time.Now()
	for i := range holds {
		holds[i] = newHold(fmt.Sprint("h", i), ttl, true)
		s.add(holds[i], now)
	}
	var got []string
	behind, lost := -1, -1
	timeout := time.After(5 * time.Second)
	for behind < 0 || lost < 0 {
		select {
		case m := <-sink.msgs:
			switch {
			case m == "locker: renewal is falling behind" && behind < 0:
				behind = len(got)
			case (m == "locker: hold lost" || m == "locker: holds lost") && lost < 0:
				lost = len(got)
			}
			got = append(got, m)
		case <-timeout:
			t.Fatalf("log = %q; want a warning that renewal is falling behind, then one that holds were lost", got)
		}
	}
	if lost < behind {
		t.Errorf("log = %q; want the lag warned of before the first loss", got)
	}
}

func TestSchedulerCompactsRemovedHolds(t *testing.T) {
	s := startScheduler(nil, func(*Hold) {}, slog.Default(), renewChunk, 1)
	defer s.close()
	const n, removed = 3000, 2000
	holds := make([]*Hold, n)
	now := time.Now()
	for i := range holds {
		holds[i] = newHold("lease", time.Hour, false)
		s.add(holds[i], now)
	}
	for _, h := range holds[:removed] {
		s.remove(h)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	live := 0
	for _, e := range s.queue {
		if !e.h.stopped {
			live++
		}
	}
	if len(s.queue) >= n || live != n-removed {
		t.Errorf("queue of %d holds after %d of %d were removed, %d of them live; want it rebuilt with all %d live ones", len(s.queue), removed, n, live, n-removed)
	}
}

// A renewal that keeps failing (a dead server, a Sentinel failover) is
// retried with growing delays: a handful of attempts per TTL, not a
// retry as soon as the last one failed.
func TestSchedulerBacksOffFailedRenewals(t *testing.T) {
	var mu sync.Mutex
	attempts := 0
	r := newRecorder(func(*Hold) error {
		mu.Lock()
		attempts++
		mu.Unlock()
		return locker.ErrUnavailable
	})
	s := newScheduler(r, func(*Hold) {}, slog.Default())
	defer s.close()
	const ttl = 600 * time.Millisecond
	h := newHold("unreachable", ttl, true)
	s.add(h, time.Now())
	waitLost(t, h, 10*ttl)
	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d renewal attempts in a TTL of %v", attempts, ttl)
	if attempts < 3 || attempts > 10 {
		t.Errorf("a hold whose renewals all failed was tried %d times in its TTL; want 3 to 10", attempts)
	}
}

// renewingBackend is a Backend that renews through a recorder.
type renewingBackend struct{ *recorder }

func (renewingBackend) Acquire(context.Context, *Hold, bool) (bool, error) { return true, nil }
func (renewingBackend) Release(context.Context, *Hold) error               { return nil }

// RenewChunk lets a Core hand its Renewer more holds per call than the
// default, and values below the default are raised to it. Holds taken at
// their due time count as late, in chunks eight times as large: 1024 by
// default.
func TestRenewChunk(t *testing.T) {
	for _, tc := range []struct{ chunk, n, want int }{{1024, 3000, 3000}, {16, 3000, lateChunk}} {
		r := newRecorder(func(*Hold) error { return nil })
		c := NewCore("test", renewingBackend{r}, slog.Default(), RenewChunk(tc.chunk))
		now := time.Now()
		for range tc.n {
			c.sched.add(newHold("h", 300*time.Millisecond, true), now)
		}
		<-r.called
		if got := r.batchSizes()[0]; got != tc.want {
			t.Errorf("RenewChunk(%d) with %d holds due together: first Renew call got %d; want %d", tc.chunk, tc.n, got, tc.want)
		}
		_ = c.Close(context.Background())
	}
}

// Whoever sees Lost closed sees the hold lost: Unlock called right after
// <-Lost() reports ErrLockLost, not a release sent to a dead server.
func TestLostClosedMeansLost(t *testing.T) {
	for range 20000 {
		h := newHold("x", time.Second, true)
		go h.MarkLost()
		// Poll rather than block: a parked receiver is woken only after
		// MarkLost's goroutine moves on; a polling one sees the close at
		// once, as another goroutine on another core would.
		for done := false; !done; {
			select {
			case <-h.Lost():
				done = true
			default:
			}
		}
		if !h.isLost() {
			t.Fatal("isLost() = false after Lost() closed")
		}
	}
}

// deadlineBackend honours deadlines; its Release reports the context it
// was given and, once fail is set, fails once after calling onRelease.
type deadlineBackend struct {
	released  chan releaseCall
	fail      atomic.Bool
	onRelease func() // if not nil, called by the failing Release
}

func (*deadlineBackend) Acquire(context.Context, *Hold, bool) (bool, error) { return true, nil }
func (*deadlineBackend) HonoursDeadlines() bool                             { return true }

func (b *deadlineBackend) Release(ctx context.Context, _ *Hold) error {
	b.released <- releaseCall{ctx.Value(ctxKey{}), ctx.Err()}
	if b.fail.CompareAndSwap(true, false) {
		b.onRelease()
		return locker.ErrUnavailable
	}
	return nil
}

type ctxKey struct{}

// releaseCall is what a Release saw: its context's ctxKey value and error.
type releaseCall struct {
	value any
	err   error
}

// ReleaseCtx on an engine that honours deadlines releases under the
// caller's context (its values reach the engine: made on the caller's
// goroutine, not a worker's); a release whose context ended before an
// answer goes on in the background and says so.
func TestReleaseCtx(t *testing.T) {
	b := &deadlineBackend{released: make(chan releaseCall, 2)}
	c := NewCore("test", b, slog.Default())
	defer c.Close(context.Background())
	take := func() interface {
		ReleaseCtx(context.Context, time.Duration) error
	} {
		l, _ := c.NewLocker("x")
		g, err := locker.Take(context.Background(), l, true)
		if err != nil {
			t.Fatalf("Take() = %v", err)
		}
		return g.(interface {
			ReleaseCtx(context.Context, time.Duration) error
		})
	}
	ctx := context.WithValue(context.Background(), ctxKey{}, "caller")
	if err := take().ReleaseCtx(ctx, time.Second); err != nil {
		t.Fatalf("ReleaseCtx() = %v", err)
	}
	if got := <-b.released; got.value != "caller" {
		t.Fatalf("Release saw the context value %v; want the caller's", got.value)
	}

	// The first try fails and the caller's context ends meanwhile.
	g := take()
	ending, cancel := context.WithCancel(ctx)
	b.fail.Store(true)
	b.onRelease = cancel
	if err := g.ReleaseCtx(ending, time.Second); !errors.Is(err, locker.ErrUnavailable) {
		t.Fatalf("ReleaseCtx(ending context) = %v; want ErrUnavailable, the release going on", err)
	}
	<-b.released // the try under the caller's context
	if got := <-b.released; got.err != nil || got.value != nil {
		t.Fatalf("the background retry ran under a context with value %v, error %v; want one of its own, live", got.value, got.err)
	}
}
