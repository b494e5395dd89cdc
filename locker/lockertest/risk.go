package lockertest

import (
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/locker"
)

// AtRiskBeforeLost takes a hold of ttl on e, whose engine reports to
// causes, freezes the server (pause) and checks that the hold is reported
// at risk before its Lost closes, within 3×ttl; resume thaws the server.
// It logs when each came, counted from the freeze.
func AtRiskBeforeLost(t *testing.T, e locker.Engine, causes *Causes, ttl time.Duration, pause, resume func() error) {
	t.Helper()
	l := newLocker(t, e, lockName(t, "risk"), locker.WithTTL(ttl))
	mustLock(t, l)
	token, lost := l.Token(), l.Lost()
	if err := pause(); err != nil {
		t.Fatalf("pause() = %v", err)
	}
	frozen := time.Now()
	select {
	case <-lost:
	case <-time.After(3 * ttl):
		_ = resume()
		t.Fatalf("Lost() not closed %v into the freeze", 3*ttl)
	}
	lostAt := time.Now()
	if err := resume(); err != nil {
		t.Fatalf("resume() = %v", err)
	}
	at, ok := causes.AtRiskAt(token)
	switch {
	case !ok:
		t.Errorf("hold lost %v into the freeze without being reported at risk", lostAt.Sub(frozen))
	case !at.Before(lostAt):
		t.Errorf("hold reported at risk %v after its loss; want before", at.Sub(lostAt))
	default:
		t.Logf("at risk %v into the freeze, lost %v into it (%v later)", at.Sub(frozen), lostAt.Sub(frozen), lostAt.Sub(at))
	}
	_ = l.Unlock() // ErrLockLost
}
