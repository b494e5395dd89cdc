package redis_test

import (
	"bufio"
	"fmt"
	"net"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/orthrus-go/orthrus/internal/testserver"
	"github.com/orthrus-go/orthrus/locker/lockertest"
)

// pauseServer freezes s and waits until it no longer answers: SIGSTOP
// takes effect asynchronously.
func pauseServer(s *testserver.Server) error {
	if err := s.Pause(); err != nil {
		return err
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", s.Addr(), time.Second)
		if err != nil {
			return err
		}
		_ = conn.SetDeadline(time.Now().Add(100 * time.Millisecond))
		_, err = conn.Write([]byte("PING\r\n"))
		if err == nil {
			_, err = bufio.NewReader(conn).ReadString('\n')
		}
		conn.Close()
		if err != nil {
			return nil // no answer: frozen
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s still answers 5s after SIGSTOP", s)
		}
	}
}

// faultClient is a client as config.Open builds it: one failure surfaces
// at once, and reads give up after a second.
func faultClient(t *testing.T, addr string, contextTimeout bool) *goredis.Client {
	c := goredis.NewClient(&goredis.Options{
		Addr:                  addr,
		ReadTimeout:           time.Second,
		DialerRetries:         1,
		MaxRetries:            -1,
		ContextTimeoutEnabled: contextTimeout,
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// The fault suite, a server of its own per case, frozen or killed, with and
// without ContextTimeoutEnabled: without it go-redis honours neither the
// deadline nor the cancellation of a context, with it only the deadline;
// the engine must return when the caller's context ends either way.
func TestFaults(t *testing.T) {
	for _, contextTimeout := range []bool{false, true} {
		t.Run(fmt.Sprintf("ContextTimeoutEnabled=%v", contextTimeout), func(t *testing.T) {
			lockertest.RunFaults(t, func(t *testing.T) lockertest.FaultHarness {
				s := testserver.Redis(t)
				return lockertest.FaultHarness{
					Harness:        harness(t, faultClient(t, s.Addr(), contextTimeout)),
					Pause:          func() error { return pauseServer(s) },
					Resume:         s.Resume,
					Kill:           s.Kill,
					RequestTimeout: time.Second,
				}
			})
		})
	}
}
