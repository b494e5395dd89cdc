package locker

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

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
		if tc.ok != (err == nil) || (err != nil && !errors.Is(err, ErrInvalidName)) {
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
	s, err = Resolve(WithTTL(time.Second), WithLease(2*time.Second), WithOwner("job-7"))
	if err != nil || s.TTL != 2*time.Second || s.Renew || s.Owner != "job-7" {
		t.Errorf("Resolve(WithTTL, WithLease, WithOwner) = %+v, %v; want the lease to win", s, err)
	}
	if _, err := Resolve(WithOwner(strings.Repeat("o", maxOwnerLen+1))); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("Resolve(WithOwner(too long)) = %v; want ErrInvalidArgument", err)
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
	return &Hold{Name: name, TTL: ttl, Renew: renew, ReleaseTimeout: time.Second, lost: make(chan struct{}), index: -1}
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
		// Granted over 40ms: all within half an interval of each other.
		s.add(newHold("h", ttl, true), now.Add(time.Duration(i)*800*time.Microsecond))
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
			return ErrLockLost
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
	waitLost(t, vanished, 2*ttl)
	waitLost(t, unreachable, 2*ttl)
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
