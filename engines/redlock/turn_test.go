package redlock

import (
	"testing"
	"time"
)

// turnRig is a hub's channel with n waiters, without servers: wake stands
// for a release message from one node.
func turnRig(n int) (*hub, *wchan, []*waiter) {
	h := &hub{chans: make(map[string]*wchan), closed: true} // closed: leave sends no unsubscribe
	c := &wchan{}
	h.chans["ch"] = c
	ws := make([]*waiter, n)
	for i := range ws {
		ws[i] = &waiter{h: h, channel: "ch", c: c, wake: make(chan struct{}, 1)}
		c.waiters = append(c.waiters, ws[i])
	}
	return h, c, ws
}

// woken lists the waiters holding a wake-up token, taking them.
func woken(ws []*waiter) []int {
	var got []int
	for i, w := range ws {
		select {
		case <-w.wake:
			got = append(got, i)
		default:
		}
	}
	return got
}

// A release's messages (one per node) wake one waiter of the process, not
// all: every waiter woken at once split the nodes between them again and
// again on a loaded host (issue 27's Exclusion failure).
func TestReleaseWakesOneWaiter(t *testing.T) {
	h, _, ws := turnRig(8)
	for range 5 {
		h.wake("ch")
	}
	got := woken(ws)
	if len(got) != 1 {
		t.Fatalf("waiters woken by one release's 5 messages: %v; want one", got)
	}
	// The messages that came while it tried give the next turn, to the
	// waiter that had it least recently, once it waits again.
	if ws[got[0]].rest() {
		t.Fatal("rest() = true with no turn given during the attempt")
	}
	if next := woken(ws); len(next) != 1 || next[0] == got[0] {
		t.Fatalf("woken after the first waits again: %v; want one other than %d", next, got[0])
	}
}

// A waiter given the turn while it tried (a message during its attempt)
// tries again at once rather than waiting.
func TestTurnDuringAttempt(t *testing.T) {
	h, c, ws := turnRig(3)
	h.wake("ch")
	w := c.turn
	if !w.rest() {
		t.Fatal("rest() = false with the turn given during the attempt; want true (try again)")
	}
	if c.turn != w {
		t.Fatal("the waiter that tries again lost the turn")
	}
	if w.rest(); c.turn != nil || len(woken(ws)) != 0 {
		t.Fatalf("after waiting again with no message meanwhile: turn %p, woken %v; want none", c.turn, woken(ws))
	}
}

// A waiter leaving with the turn without the hold (cancelled) hands it
// on; one leaving with the hold does not.
func TestLeaveHandsOnTheTurn(t *testing.T) {
	h, c, ws := turnRig(3)
	h.wake("ch")
	first := c.turn
	<-first.wake
	h.leave(first, false)
	got := woken(ws)
	if len(got) != 1 || ws[got[0]] == first {
		t.Fatalf("woken after the holder of the turn left without the hold: %v; want one other waiter", got)
	}
	h.wake("ch") // a message while the new one tries
	h.leave(c.turn, true)
	if c.turn != nil || len(woken(ws)) != 0 || c.pending {
		t.Fatalf("after a grant: turn %p, woken %v, pending %v; want none", c.turn, woken(ws), c.pending)
	}
}

// backoff's window starts at twice the attempt's duration and doubles with
// each split, up to maxSplitWindow; one node short of a majority draws
// from its first half.
func TestBackoff(t *testing.T) {
	e := &Engine{quorum: 3, timeout: 100 * time.Millisecond}
	took := 5 * time.Millisecond
	for n := 1; n <= 10; n++ {
		window := min(took<<n, e.maxSplitWindow())
		for range 200 {
			short := e.backoff(outcome{took: took, got: 2}, n)
			far := e.backoff(outcome{took: took, got: 1}, n)
			if short < time.Millisecond || short > time.Millisecond+window/2 {
				t.Fatalf("split %d, one node short: backoff %v; want within [1ms, 1ms+%v]", n, short, window/2)
			}
			if far < time.Millisecond+window/2 || far > time.Millisecond+window {
				t.Fatalf("split %d, two nodes short: backoff %v; want within [1ms+%v, 1ms+%v]", n, far, window/2, window)
			}
		}
	}
}
