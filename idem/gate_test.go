package idem_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/idem"
	"github.com/orthrus-go/orthrus/idem/internal/idemtest"
	"github.com/orthrus-go/orthrus/locker"
)

const childEnv = "IDEM_CHILD"

// submit runs n goroutines that all Begin content once they are released
// by start, and Done(success) what they got to run. It returns how many ran
// and how many were told it was a duplicate; every other outcome is an
// error.
func submit(g *idem.Gate, content any, n int, start <-chan struct{}) (runs, dups int64, err error) {
	var wg sync.WaitGroup
	var errs atomic.Value
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			tk, dup, err := g.Begin(ctx, content)
			switch {
			case err != nil:
				errs.Store(err)
			case dup != nil:
				atomic.AddInt64(&dups, 1)
			default:
				atomic.AddInt64(&runs, 1)
				if err := tk.Done(ctx, nil); err != nil {
					errs.Store(err)
				}
			}
		}()
	}
	wg.Wait()
	if e, ok := errs.Load().(error); ok {
		err = e
	}
	return runs, dups, err
}

// child is the second process of TestOnceAcrossProcesses: it prints
// "ready", submits when stdin says "go", and prints its counts.
func child() int {
	kind, addr, prefix := os.Getenv(childEnv), os.Getenv("IDEM_ADDR"), os.Getenv("IDEM_PREFIX")
	n, _ := strconv.Atoi(os.Getenv("IDEM_N"))
	s, closeFn, err := idemtest.OpenStore(kind, addr, prefix)
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	defer closeFn()
	g, err := idem.New("test-app", s)
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	start := make(chan struct{})
	fmt.Println("ready")
	line, _ := bufio.NewReader(os.Stdin).ReadString('\n')
	if line != "go\n" {
		fmt.Println("error: stdin said", line)
		return 1
	}
	close(start)
	runs, dups, err := submit(g, map[string]any{"order": 42, "op": "pay"}, n, start)
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	fmt.Println("counts", runs, dups)
	return 0
}

// 50 goroutines across 2 processes submit the same content: exactly one
// runs, the 49 others are duplicates.
func TestOnceAcrossProcesses(t *testing.T) {
	for _, e := range engines {
		t.Run(e.kind, func(t *testing.T) {
			prefix := "idemtest/once-" + e.kind
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), childEnv+"="+e.kind, "IDEM_ADDR="+idemtest.Addr(e.kind), "IDEM_PREFIX="+prefix, "IDEM_N=25")
			stdin, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = stdin.Close(); _ = cmd.Wait() })
			out := bufio.NewReader(stdout)
			if line, err := out.ReadString('\n'); line != "ready\n" {
				t.Fatalf("child said %q, %v; want ready", line, err)
			}

			s, closeFn, err := idemtest.OpenStore(e.kind, idemtest.Addr(e.kind), prefix)
			if err != nil {
				t.Fatal(err)
			}
			defer closeFn()
			g := newGate(t, s)
			start := make(chan struct{})
			type counts struct {
				runs, dups int64
				err        error
			}
			mine := make(chan counts, 1)
			go func() {
				r, d, err := submit(g, map[string]any{"op": "pay", "order": 42}, 25, start) // same content, other key order
				mine <- counts{r, d, err}
			}()
			if _, err := io.WriteString(stdin, "go\n"); err != nil {
				t.Fatal(err)
			}
			close(start)
			c := <-mine
			if c.err != nil {
				t.Fatalf("this process: %v", c.err)
			}
			line, err := out.ReadString('\n')
			var cr, cd int64
			if _, serr := fmt.Sscanf(line, "counts %d %d", &cr, &cd); serr != nil {
				t.Fatalf("child said %q, %v", line, err)
			}
			t.Logf("this process: %d ran, %d duplicates; child: %d ran, %d duplicates", c.runs, c.dups, cr, cd)
			if runs, dups := c.runs+cr, c.dups+cd; runs != 1 || dups != 49 {
				t.Errorf("%d ran and %d were duplicates; want 1 and 49", runs, dups)
			}
		})
	}
}

func begin(t *testing.T, g *idem.Gate, content any, opts ...idem.BeginOption) (*idem.Ticket, *idem.Duplicate) {
	t.Helper()
	tk, dup, err := g.Begin(context.Background(), content, opts...)
	if err != nil {
		t.Fatalf("Begin(%v) error: %v", content, err)
	}
	if (tk == nil) == (dup == nil) {
		t.Fatalf("Begin(%v) = %v, %v; want exactly one of ticket and duplicate", content, tk, dup)
	}
	return tk, dup
}

func mustRun(t *testing.T, g *idem.Gate, content any) *idem.Ticket {
	t.Helper()
	tk, dup := begin(t, g, content)
	if dup != nil {
		t.Fatalf("Begin(%v) = duplicate %+v; want a ticket", content, *dup)
	}
	return tk
}

func mustDup(t *testing.T, g *idem.Gate, content any, want idem.State) *idem.Duplicate {
	t.Helper()
	tk, dup := begin(t, g, content)
	if tk != nil {
		t.Fatalf("Begin(%v) = ticket; want a duplicate (%v)", content, want)
	}
	if dup.State != want {
		t.Fatalf("Begin(%v) = duplicate %v; want %v", content, dup.State, want)
	}
	return dup
}

// A failed attempt frees the operation at once; a successful one refuses
// duplicates for the retention, then frees it.
func TestFailureThenSuccess(t *testing.T) {
	ctx := context.Background()
	for _, e := range engines {
		t.Run(e.kind, func(t *testing.T) {
			retention := 2 * e.expiry
			g := newGate(t, newStore(t, e.kind), idem.WithExpiry(e.expiry), idem.WithRetention(retention))
			tk := mustRun(t, g, "order-1")
			mustDup(t, g, "order-1", idem.Running)
			if err := tk.Done(ctx, errors.New("card declined")); err != nil {
				t.Fatalf("Done(failure) = %v; want nil", err)
			}
			if err := tk.Done(ctx, nil); !errors.Is(err, idem.ErrDone) {
				t.Errorf("second Done = %v; want ErrDone", err)
			}

			tk = mustRun(t, g, "order-1") // the retry runs at once
			succeeded := time.Now()       // before the record is rewritten: its retention starts later
			if err := tk.Succeed(ctx, []byte("receipt-7")); err != nil {
				t.Fatalf("Succeed = %v; want nil", err)
			}
			dup := mustDup(t, g, "order-1", idem.Succeeded)
			if string(dup.Result) != "receipt-7" || dup.Store != e.kind {
				t.Errorf("duplicate result %q on %q; want %q on %q", dup.Result, dup.Store, "receipt-7", e.kind)
			}
			idemtest.Eventually(t, retention+10*time.Second, "record freed after the retention", func() (bool, error) {
				tk, _, err := g.Begin(ctx, "order-1")
				if tk != nil && time.Since(succeeded) < retention {
					return false, fmt.Errorf("ran again %v after success, within the retention %v", time.Since(succeeded), retention)
				}
				return tk != nil, err
			})
		})
	}
}

// An attempt that never reports (its process died) frees the operation
// after the expiry; its late Done then never touches the newer attempt's
// record.
func TestCrashedAttemptAndLateDone(t *testing.T) {
	ctx := context.Background()
	for _, e := range engines {
		t.Run(e.kind, func(t *testing.T) {
			g := newGate(t, newStore(t, e.kind), idem.WithExpiry(e.expiry), idem.WithRetention(time.Hour))
			for _, lateErr := range []error{nil, errors.New("failed late")} {
				content := fmt.Sprintf("job-%v", lateErr)
				begun := time.Now() // before the record is made: its expiry starts later
				crashed := mustRun(t, g, content)
				var newer *idem.Ticket
				idemtest.Eventually(t, e.expiry+10*time.Second, "crashed attempt freed", func() (bool, error) {
					tk, _, err := g.Begin(ctx, content)
					if tk != nil && time.Since(begun) < e.expiry {
						return false, fmt.Errorf("ran again %v after the crashed attempt, within the expiry %v", time.Since(begun), e.expiry)
					}
					newer = tk
					return tk != nil, err
				})
				if err := crashed.Done(ctx, lateErr); !errors.Is(err, idem.ErrNotOwner) {
					t.Fatalf("late Done(%v) = %v; want ErrNotOwner", lateErr, err)
				}
				mustDup(t, g, content, idem.Running) // the newer attempt's record is intact
				if err := newer.Succeed(ctx, []byte("ok")); err != nil {
					t.Fatalf("newer attempt's Succeed = %v; want nil", err)
				}
				if dup := mustDup(t, g, content, idem.Succeeded); string(dup.Result) != "ok" {
					t.Errorf("result %q; want %q", dup.Result, "ok")
				}
			}
		})
	}
}

// A fingerprint tells a reused ID from a retried request.
func TestFingerprint(t *testing.T) {
	for _, e := range engines {
		t.Run(e.kind, func(t *testing.T) {
			g := newGate(t, newStore(t, e.kind))
			tk, _ := begin(t, g, "key-1", idem.WithFingerprint([]byte("body-a")))
			if tk == nil {
				t.Fatal("first Begin was a duplicate")
			}
			_, dup := begin(t, g, "key-1", idem.WithFingerprint([]byte("body-a")))
			if dup == nil || dup.Mismatch {
				t.Errorf("same fingerprint: duplicate %+v; want Mismatch false", dup)
			}
			_, dup = begin(t, g, "key-1", idem.WithFingerprint([]byte("body-b")))
			if dup == nil || !dup.Mismatch {
				t.Errorf("other fingerprint: duplicate %+v; want Mismatch true", dup)
			}
		})
	}
}

// Lookup and Forget see and clear a record, on every engine.
func TestLookupForget(t *testing.T) {
	ctx := context.Background()
	for _, e := range engines {
		t.Run(e.kind, func(t *testing.T) {
			g := newGate(t, newStore(t, e.kind))
			tk := mustRun(t, g, "invoice-9")
			if err := tk.Succeed(ctx, []byte("done")); err != nil {
				t.Fatal(err)
			}
			id, _ := g.Identify("invoice-9")
			rec, _, ok, err := g.Lookup(ctx, "", id)
			if err != nil || !ok || rec.State != idem.Succeeded || string(rec.Result) != "done" {
				t.Fatalf("Lookup = %+v, %v, %v; want succeeded with result done", rec, ok, err)
			}
			if ok, err := g.Forget(ctx, "", id); !ok || err != nil {
				t.Fatalf("Forget = %v, %v; want true, nil", ok, err)
			}
			if _, _, ok, err := g.Lookup(ctx, "", id); ok || err != nil {
				t.Fatalf("Lookup after Forget = %v, %v; want false, nil", ok, err)
			}
			mustRun(t, g, "invoice-9")
		})
	}
}

// With the store paused or killed, Begin returns within the request
// timeout: an error with FailClosed, an unguarded ticket with FailOpen.
func TestStoreDown(t *testing.T) {
	const timeout = 300 * time.Millisecond
	const bound = 3 * time.Second // timeout plus a loaded machine's slack
	for _, e := range engines {
		t.Run(e.kind, func(t *testing.T) {
			srv := idemtest.StartServer(t, e.kind)
			s := storeOn(t, e.kind, srv.Addr())
			closed := newGate(t, s, idem.WithRequestTimeout(timeout))
			open := newGate(t, s, idem.WithRequestTimeout(timeout), idem.WithPolicy(idem.FailOpen))
			probe := newGate(t, s)
			// Connected, with the namespace made, before the fault: a fresh
			// ZooKeeper session can take longer than the short timeout.
			idemtest.Eventually(t, 20*time.Second, "warm-up", func() (bool, error) {
				tk, _, err := probe.Begin(context.Background(), "warm-up")
				return tk != nil && err == nil, nil
			})

			for _, fault := range []string{"pause", "kill"} {
				switch fault {
				case "pause":
					if err := srv.Pause(); err != nil {
						t.Fatal(err)
					}
				case "kill":
					if err := srv.Kill(); err != nil {
						t.Fatal(err)
					}
				}
				for i, g := range []*idem.Gate{closed, open} {
					content := fmt.Sprintf("%s-%d", fault, i)
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					start := time.Now()
					tk, dup, err := g.Begin(ctx, content)
					took := time.Since(start)
					cancel()
					if took > bound {
						t.Errorf("%s, gate %d: Begin took %v; want at most %v", fault, i, took, bound)
					}
					if g == closed {
						if !errors.Is(err, locker.ErrUnavailable) || tk != nil || dup != nil {
							t.Errorf("%s, fail-closed: Begin = %v, %v, %v; want ErrUnavailable", fault, tk, dup, err)
						}
						continue
					}
					if err != nil || tk == nil || !tk.Unguarded() {
						t.Fatalf("%s, fail-open: Begin = %v, %v, %v; want an unguarded ticket", fault, tk, dup, err)
					}
					if err := tk.Done(context.Background(), nil); err != nil {
						t.Errorf("%s, fail-open: Done = %v; want nil", fault, err)
					}
				}
				if err := srv.Resume(); err != nil && fault == "pause" {
					t.Fatal(err)
				}
				if fault == "kill" {
					if err := srv.Restart(); err != nil {
						t.Fatal(err)
					}
				}
				idemtest.Eventually(t, 20*time.Second, "store back after "+fault, func() (bool, error) {
					tk, _, err := probe.Begin(context.Background(), "back-"+fault)
					return tk != nil && err == nil, nil
				})
			}
			if st := closed.Stats(); st.Refused != 2 {
				t.Errorf("fail-closed gate refused %d; want 2", st.Refused)
			}
			if st := open.Stats(); st.Unguarded != 2 {
				t.Errorf("fail-open gate let %d through unguarded; want 2", st.Unguarded)
			}
		})
	}
}

// A gate whose client its owner closed is closed, not an outage: Begin's
// error wraps locker.ErrClosed, which no fail-open policy lets through and
// no alert on unavailability counts.
func TestBeginOnClosedClient(t *testing.T) {
	for _, e := range engines {
		t.Run(e.kind, func(t *testing.T) {
			s, closeFn, err := idemtest.OpenStore(e.kind, idemtest.Addr(e.kind), "idemtest/"+t.Name())
			if err != nil {
				t.Fatal(err)
			}
			g := newGate(t, s, idem.WithPolicy(idem.FailOpen))
			closeFn()
			tk, dup, err := g.Begin(context.Background(), "order-1")
			if !errors.Is(err, locker.ErrClosed) || errors.Is(err, locker.ErrUnavailable) {
				t.Errorf("Begin() on a closed client = %v, %v, %v; want an error wrapping ErrClosed, not ErrUnavailable", tk, dup, err)
			}
		})
	}
}

// An error names the call that was made: Done after Succeed says Done.
func TestDoneAfterSucceedNamesDone(t *testing.T) {
	ctx := context.Background()
	g := newGate(t, newStore(t, "redis"))
	tk := mustRun(t, g, "order-1")
	if err := tk.Succeed(ctx, nil); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		call string
		err  error
	}{
		{"Done", tk.Done(ctx, nil)},
		{"Done", tk.Done(ctx, errors.New("declined"))},
		{"Succeed", tk.Succeed(ctx, nil)},
	} {
		if !errors.Is(tc.err, idem.ErrDone) || !strings.HasPrefix(tc.err.Error(), "idem: "+tc.call+" ") {
			t.Errorf("%s after Succeed = %v; want ErrDone, with a message starting \"idem: %s \"", tc.call, tc.err, tc.call)
		}
	}
}

// Done runs its Lua scripts by SHA-1; a Redis server that lost them (a
// restart, SCRIPT FLUSH) is sent the script itself.
func TestRedisScriptsFlushed(t *testing.T) {
	ctx := context.Background()
	c := idemtest.RedisClient(redisAddr)
	t.Cleanup(func() { _ = c.Close() })
	g := newGate(t, newStore(t, "redis"))
	for _, opErr := range []error{nil, errors.New("failed")} {
		tk := mustRun(t, g, fmt.Sprintf("op-%v", opErr))
		if err := c.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if err := tk.Done(ctx, opErr); err != nil {
			t.Fatalf("Done(%v) after SCRIPT FLUSH = %v; want nil", opErr, err)
		}
		rec, _, ok, err := g.Lookup(ctx, "", tk.ID())
		switch {
		case err != nil:
			t.Fatal(err)
		case opErr == nil && (!ok || rec.State != idem.Succeeded):
			t.Errorf("after Done(nil): %+v, %v; want succeeded", rec, ok)
		case opErr != nil && ok:
			t.Errorf("after Done(%v): %+v; want no record", opErr, rec)
		}
	}
}
