package redis_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"runtime"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/orthrus-go/orthrus/engines/redis"
	"github.com/orthrus-go/orthrus/internal/testserver"
	"github.com/orthrus-go/orthrus/locker"
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
	t.Cleanup(func() {
		_ = c.Close()
		awaitDialProbe()
	})
	return c
}

// awaitDialProbe waits, at most 3s, for go-redis's dial probes to end: once
// a pool's dials have failed PoolSize times (the fault suite's calls, each
// side and kind, against a killed server), the pool probes the server
// every second until a dial works or it is closed, and sees that it was
// closed only when it wakes. The probe is the client's, which an engine
// never closes; the suite's leak check runs after this.
func awaitDialProbe() {
	deadline := time.Now().Add(3 * time.Second)
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if !bytes.Contains(buf[:n], []byte("pool.(*ConnPool).tryDial")) {
			return
		}
		if time.Now().After(deadline) {
			return // the leak check tells whether it is this client's
		}
		time.Sleep(50 * time.Millisecond)
	}
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

// TryLock and Lock on a frozen server return ErrUnavailable within the
// engine's request timeout, over a client with go-redis's defaults (a read
// timeout of 5s, three retries), with and without ContextTimeoutEnabled.
func TestFrozenWithinRequestTimeout(t *testing.T) {
	const bound = redis.DefaultRequestTimeout
	for _, contextTimeout := range []bool{false, true} {
		t.Run(fmt.Sprintf("ContextTimeoutEnabled=%v", contextTimeout), func(t *testing.T) {
			s := testserver.Redis(t)
			c := goredis.NewClient(&goredis.Options{Addr: s.Addr(), ContextTimeoutEnabled: contextTimeout})
			defer c.Close()
			e := newEngine(t, c, redis.WithLogger(quietLog))
			defer e.Close()
			l, _ := e.NewLocker("frozen")
			if err := l.Lock(); err != nil {
				t.Fatalf("Lock() = %v", err)
			}
			if err := l.Unlock(); err != nil {
				t.Fatalf("Unlock() = %v", err)
			}
			if err := pauseServer(s); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = s.Resume() }()
			for _, call := range []struct {
				name string
				fn   func() error
			}{
				{"TryLock", func() error { _, err := l.TryLock(); return err }},
				{"Lock", l.Lock},
			} {
				start := time.Now()
				err := call.fn()
				took := time.Since(start)
				t.Logf("%s() on a frozen server: %v after %v", call.name, err, took)
				if !errors.Is(err, locker.ErrUnavailable) {
					t.Errorf("%s() on a frozen server = %v; want ErrUnavailable", call.name, err)
				}
				if limit := bound + 500*time.Millisecond; took > limit {
					t.Errorf("%s() on a frozen server returned after %v; want within %v", call.name, took, limit)
				}
			}
		})
	}
}
