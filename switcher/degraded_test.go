package switcher_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/switcher"
)

var errDown = fmt.Errorf("%w: no answer at start", locker.ErrUnavailable)

func TestDownAtStartRejectsBadInput(t *testing.T) {
	for _, tc := range []struct {
		name string
		opt  switcher.Option
	}{
		{"empty engine", switcher.WithDownAtStart("", errDown)},
		{"nil cause", switcher.WithDownAtStart("primary", nil)},
		{"unknown engine", switcher.WithDownAtStart("nope", errDown)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, _ := redisEngine(t, "primary", primaryAddr)
			s, _ := redisEngine(t, "secondary", secondaryAddr)
			sw, err := switcher.New([]locker.Engine{p, s}, tc.opt)
			if err == nil {
				_ = sw.Close()
			} else { // New failed: the engines are still the caller's
				_, _ = p.Close(), s.Close()
			}
			if !errors.Is(err, locker.ErrInvalidArgument) || !strings.Contains(fmt.Sprint(err), "WithDownAtStart") {
				t.Errorf("New() = %v; want ErrInvalidArgument naming WithDownAtStart", err)
			}
		})
	}
}

// TestDownAtStart: the engine to start on is down, so New starts on the
// next one, with the down engine's breaker open whatever the breaker
// settings (gobreaker cannot be told to open: the start's failure trips
// it); the health check closes it once the open period has passed and it
// answers (here it answers all along), and failback returns to it.
func TestDownAtStart(t *testing.T) {
	for _, tc := range []struct {
		name    string
		breaker switcher.Option
	}{
		{"WithBreaker", switcher.WithBreaker(3, 200*time.Millisecond)},
		{"WithBreakerSettings that never trip", switcher.WithBreakerSettings(gobreaker.Settings{
			Timeout: 200 * time.Millisecond, ReadyToTrip: func(gobreaker.Counts) bool { return false }})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sw, _ := newSwitcher(t, [2]string{primaryAddr, secondaryAddr}, tc.breaker,
				switcher.WithStart("primary"), switcher.WithDownAtStart("primary", errDown),
				switcher.WithHealthCheck(20*time.Millisecond, 300*time.Millisecond), switcher.WithFailback(100*time.Millisecond))
			if got := sw.Current(); got != "secondary" {
				t.Errorf("Current() = %q; want secondary", got)
			}
			if st := sw.States()[0]; st.Breaker != gobreaker.StateOpen || st.Healthy {
				t.Errorf("States()[0] = %+v; want its breaker open, not healthy", st)
			}
			deadline := time.Now().Add(5 * time.Second)
			for sw.Current() != "primary" {
				if time.Now().After(deadline) {
					t.Fatalf("Current() = %q, States() = %+v 5s after New; want a failback to primary", sw.Current(), sw.States())
				}
				time.Sleep(10 * time.Millisecond) // polling with a deadline
			}
		})
	}
}

// TestEveryEngineDownAtStart: with every engine down, New starts on the
// WithStart engine and every breaker is open.
func TestEveryEngineDownAtStart(t *testing.T) {
	sw, _ := newSwitcher(t, [2]string{primaryAddr, secondaryAddr}, switcher.WithStart("secondary"),
		switcher.WithDownAtStart("primary", errDown), switcher.WithDownAtStart("secondary", errDown))
	if got := sw.Current(); got != "secondary" {
		t.Errorf("Current() = %q; want secondary", got)
	}
	for _, st := range sw.States() {
		if st.Breaker != gobreaker.StateOpen {
			t.Errorf("%s: breaker %v; want open", st.Name, st.Breaker)
		}
	}
}
