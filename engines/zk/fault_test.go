package zk_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/engines/zk"
	"github.com/orthrus-go/orthrus/internal/testserver"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/driver"
	"github.com/orthrus-go/orthrus/locker/lockertest"
)

func lease(l locker.Locker) locker.Lease { return l.(locker.Lease) }

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func TestUnreachableAtNew(t *testing.T) {
	// A port nobody listens on.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := l.Addr().String()
	l.Close()

	// A server that accepts and never answers, like a frozen one.
	hole, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	var mu sync.Mutex
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := hole.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	defer func() {
		hole.Close()
		wg.Wait()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	}()

	const timeout = 500 * time.Millisecond
	for _, tc := range []struct {
		desc    string
		servers []string
	}{
		{"refused", []string{refused}},
		{"black hole", []string{hole.Addr().String()}},
		{"unresolvable", []string{"no-such-host.invalid:2181"}},
	} {
		start := time.Now()
		e, err := zk.New(tc.servers, zk.WithConnectTimeout(timeout), zk.WithLogger(quiet))
		elapsed := time.Since(start)
		if !errors.Is(err, locker.ErrUnavailable) {
			t.Errorf("New(%s) = %v; want ErrUnavailable", tc.desc, err)
		}
		if e != nil {
			e.Close()
		}
		// The connect timeout, then at most the second go-zookeeper waits
		// for its close request, and the DNS lookup.
		if limit := timeout + 3*time.Second; elapsed > limit {
			t.Errorf("New(%s) failed after %v; want within %v", tc.desc, elapsed, limit)
		}
	}
}

// An ensemble lost after New: calls fail with ErrUnavailable within the
// connect timeout, the hold is reported lost after the session timeout,
// and Close stays bounded.
func TestUnavailableAfterStart(t *testing.T) {
	s := testserver.ZooKeeper(t)
	const connect, session = 700 * time.Millisecond, 1500 * time.Millisecond
	e := newEngine(t, []string{s.Addr()}, zk.WithConnectTimeout(connect), zk.WithSessionTimeout(session))
	name := t.Name()
	a, _ := e.NewLocker(name)
	b, _ := e.NewLocker(name)
	if err := a.Lock(); err != nil {
		t.Fatal(err)
	}
	lost := lease(a).Lost()
	killed := time.Now()
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	limit := 2*connect + time.Second
	start := time.Now()
	if err := b.Lock(); !errors.Is(err, locker.ErrUnavailable) {
		t.Errorf("Lock() = %v; want ErrUnavailable", err)
	}
	if d := time.Since(start); d > limit {
		t.Errorf("Lock() failed after %v; want within %v", d, limit)
	}
	start = time.Now()
	if ok, err := b.TryLock(); ok || !errors.Is(err, locker.ErrUnavailable) {
		t.Errorf("TryLock() = %v, %v; want false, ErrUnavailable", ok, err)
	}
	if err := e.Ping(context.Background()); !errors.Is(err, locker.ErrUnavailable) {
		t.Errorf("Ping() = %v; want ErrUnavailable", err)
	}
	if d := time.Since(start); d > 2*limit {
		t.Errorf("TryLock() and Ping() failed after %v; want within %v", d, 2*limit)
	}
	select {
	case <-lost:
		// The session timeout counts from the last answer, which may be a
		// ping interval (a third of it) older than the kill.
		if d := time.Since(killed); d < session/2 {
			t.Errorf("Lost() closed %v after the server died; want no sooner than about the session timeout %v", d, session)
		}
	case <-time.After(session + 3*time.Second):
		t.Fatalf("Lost() not closed %v after the server died", session+3*time.Second)
	}
	if err := a.Unlock(); !errors.Is(err, locker.ErrLockLost) {
		t.Errorf("Unlock() after the loss = %v; want ErrLockLost", err)
	}
	start = time.Now()
	if err := e.Close(); err != nil {
		t.Errorf("Close() = %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Close() took %v with the server gone; want within 5s", d)
	}
}

// A server frozen past the session timeout: the holder learns it has lost
// the lock while the server is still frozen; afterwards a new holder gets
// a higher token, and the engine goes on with a new session.
func TestPausePastSessionTimeout(t *testing.T) {
	s := testserver.ZooKeeper(t)
	const session = time.Second
	e := newEngine(t, []string{s.Addr()}, zk.WithSessionTimeout(session), zk.WithConnectTimeout(5*time.Second))
	defer e.Close()
	other := newEngine(t, []string{s.Addr()}, zk.WithSessionTimeout(10*time.Second), zk.WithConnectTimeout(10*time.Second))
	defer other.Close()
	name := t.Name()
	a, _ := e.NewLocker(name)
	if err := a.Lock(); err != nil {
		t.Fatal(err)
	}
	before := lease(a).Token()
	pause(t, s)
	paused := true
	defer func() {
		if paused {
			_ = s.Resume()
		}
	}()
	select {
	case <-lease(a).Lost():
	case <-time.After(session + 3*time.Second):
		t.Fatalf("Lost() not closed %v into the pause", session+3*time.Second)
	}
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	paused = false
	if err := a.Unlock(); !errors.Is(err, locker.ErrLockLost) {
		t.Errorf("Unlock() after the loss = %v; want ErrLockLost", err)
	}
	b, _ := other.NewLocker(name)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := b.LockCtx(ctx); err != nil {
		t.Fatalf("LockCtx() after the pause = %v", err)
	}
	if after := lease(b).Token(); after <= before {
		t.Errorf("token after the pause = %d; want > %d", after, before)
	}
	if err := b.Unlock(); err != nil {
		t.Fatal(err)
	}
	// The engine that lost its hold serves new acquisitions.
	if err := a.LockCtx(ctx); err != nil {
		t.Fatalf("LockCtx() on the engine whose session was lost = %v", err)
	}
	if err := a.Unlock(); err != nil {
		t.Fatal(err)
	}
}

// referee records holders and counts overlaps: a new holder while the
// previous one still holds and has not been told it lost the lock.
type referee struct {
	mu       sync.Mutex
	holder   int
	lost     <-chan struct{}
	overlaps []string
	order    []int
}

func newReferee() *referee { return &referee{holder: -1} }

func (r *referee) enter(id int, lost <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.holder >= 0 && !isClosed(r.lost) {
		r.overlaps = append(r.overlaps, fmt.Sprintf("owner %d got the lock while owner %d held it", id, r.holder))
	}
	r.holder, r.lost = id, lost
	r.order = append(r.order, id)
}

func (r *referee) leave(id int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.holder == id {
		r.holder, r.lost = -1, nil
	}
}

// drill queues owners[1:] behind owners[0], which holds, runs fault, and
// then lets the queue drain. It reports whether the first hold survived.
func drill(t *testing.T, owners []locker.Locker, fault func()) (survived bool) {
	t.Helper()
	r := newReferee()
	if err := owners[0].Lock(); err != nil {
		t.Fatal(err)
	}
	r.enter(0, lease(owners[0]).Lost())
	errs := make(chan error, len(owners))
	for i := 1; i < len(owners); i++ {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			if err := owners[i].LockCtx(ctx); err != nil {
				errs <- fmt.Errorf("owner %d: LockCtx() = %w", i, err)
				return
			}
			r.enter(i, lease(owners[i]).Lost())
			time.Sleep(20 * time.Millisecond) // a critical section
			r.leave(i)
			if err := owners[i].Unlock(); err != nil && !(errors.Is(err, locker.ErrLockLost) && isClosed(lease(owners[i]).Lost())) {
				errs <- fmt.Errorf("owner %d: Unlock() = %w", i, err)
				return
			}
			errs <- nil
		}()
	}
	fault()
	lost := lease(owners[0]).Lost()
	survived = !isClosed(lost)
	r.leave(0)
	if err := owners[0].Unlock(); err != nil && !(errors.Is(err, locker.ErrLockLost) && isClosed(lost)) {
		t.Errorf("owner 0: Unlock() = %v", err)
	}
	for i := 1; i < len(owners); i++ {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, o := range r.overlaps {
		t.Error(o)
	}
	if len(r.order) != len(owners) {
		t.Errorf("grants %v; want one per owner", r.order)
	}
	return survived
}

// A server killed and restarted within the session timeout, with a holder
// and waiters on three sessions: the sessions survive, the holder keeps the
// lock, the waiters follow, and there are never two holders.
func TestKillRestartKeepsHolds(t *testing.T) {
	s := testserver.ZooKeeper(t)
	const session = 10 * time.Second
	owners := make([]locker.Locker, 3)
	engines := make([]*zk.Engine, len(owners))
	for i := range owners {
		engines[i] = newEngine(t, []string{s.Addr()}, zk.WithSessionTimeout(session), zk.WithConnectTimeout(20*time.Second))
		defer engines[i].Close()
		owners[i], _ = engines[i].NewLocker(t.Name())
	}
	c := admin(t, s.Addr())
	parent := engines[0].LockPath(t.Name())
	var took time.Duration
	sessions := make([]int64, len(engines))
	survived := drill(t, owners, func() {
		waitFor(t, 10*time.Second, "waiters queued", func() bool {
			nodes, err := lockNodes(c, parent)
			return err == nil && len(nodes) == len(owners)
		})
		for i, e := range engines {
			sessions[i] = e.SessionID()
		}
		start := time.Now()
		if err := s.Kill(); err != nil {
			t.Fatal(err)
		}
		if err := s.Restart(); err != nil {
			t.Fatal(err)
		}
		// Every engine is back (go-zookeeper waits a second between rounds
		// of its server list; until it has reconnected, Ping fails at once
		// with ErrRefused).
		for i, e := range engines {
			waitFor(t, 20*time.Second, fmt.Sprintf("engine %d: Ping() after the restart", i), func() bool {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				return e.Ping(ctx) == nil
			})
		}
		took = time.Since(start)
	})
	t.Logf("server back after %v; hold survived: %v", took, survived)
	if took < session/2 {
		if !survived {
			t.Errorf("the hold was lost although the server was back after %v, within the session timeout %v", took, session)
		}
		for i, e := range engines {
			if got := e.SessionID(); got != sessions[i] {
				t.Errorf("engine %d: session %#x after the restart; want the same %#x", i, got, sessions[i])
			}
		}
	}
}

// A three-server ensemble loses its leader while a lock is held and waiters
// queue: holds survive the election (or are reported lost, never silently
// duplicated) and the queue moves on.
func TestEnsembleLeaderKill(t *testing.T) {
	cl := testserver.ZooKeeperEnsemble(t, 3)
	const session = 8 * time.Second
	owners := make([]locker.Locker, 4)
	engines := make([]*zk.Engine, len(owners))
	for i := range owners {
		engines[i] = newEngine(t, cl.Addrs(), zk.WithSessionTimeout(session), zk.WithConnectTimeout(20*time.Second))
		defer engines[i].Close()
		owners[i], _ = engines[i].NewLocker(t.Name())
	}
	// Another lock, held across the election by the first engine.
	other, _ := engines[0].NewLocker(t.Name() + "/other")
	if err := other.Lock(); err != nil {
		t.Fatal(err)
	}
	c := admin(t, cl.Addrs()...)
	parent := engines[0].LockPath(t.Name())
	survived := drill(t, owners, func() {
		waitFor(t, 10*time.Second, "waiters queued", func() bool {
			nodes, err := lockNodes(c, parent)
			return err == nil && len(nodes) == len(owners)
		})
		leader, err := cl.WaitLeader(10 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if err := leader.Kill(); err != nil {
			t.Fatal(err)
		}
		if _, err := cl.WaitLeader(30 * time.Second); err != nil {
			t.Fatal(err)
		}
		for i, e := range engines {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			err := e.Ping(ctx)
			cancel()
			if err != nil {
				t.Fatalf("engine %d: Ping() after the election = %v", i, err)
			}
		}
	})
	t.Logf("hold survived the election: %v", survived)
	if isClosed(lease(other).Lost()) != !survived {
		t.Logf("the two holds of one session fared differently: first %v, other lost %v", survived, isClosed(lease(other).Lost()))
	}
	if err := other.Unlock(); err != nil && !errors.Is(err, locker.ErrLockLost) {
		t.Errorf("Unlock() of the other lock = %v", err)
	}
}

// A create sent to a frozen server, whose reply never comes: once the
// server is back the lock is taken with one node, and no orphan stays.
func TestCreateDuringPause(t *testing.T) {
	s := testserver.ZooKeeper(t)
	e := newEngine(t, []string{s.Addr()}, zk.WithSessionTimeout(2*time.Second), zk.WithConnectTimeout(20*time.Second))
	defer e.Close()
	c := admin(t, s.Addr())
	name := t.Name()
	parent := e.LockPath(name)
	// The parent exists: the create is the one request in flight.
	l, _ := e.NewLocker(name)
	if err := l.Lock(); err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(); err != nil {
		t.Fatal(err)
	}
	pause(t, s)
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		done <- l.LockCtx(ctx)
	}()
	// The fault: frozen past the receive timeout (2/3 of the session
	// timeout), so that the client drops the connection and the reply.
	time.Sleep(1600 * time.Millisecond)
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("LockCtx() across the pause = %v", err)
	}
	nodes, err := lockNodes(c, parent)
	if err != nil || len(nodes) != 1 {
		t.Errorf("nodes after the lock was taken = %v, %v; want exactly one", nodes, err)
	}
	if err := l.Unlock(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "no node left", func() bool {
		nodes, err := lockNodes(c, parent)
		return err == nil && len(nodes) == 0
	})
}

// A wait cancelled while the server is frozen leaves nothing once it is
// back.
func TestCancelDuringPauseLeavesNothing(t *testing.T) {
	s := testserver.ZooKeeper(t)
	e := newEngine(t, []string{s.Addr()}, zk.WithSessionTimeout(10*time.Second), zk.WithConnectTimeout(10*time.Second))
	defer e.Close()
	c := admin(t, s.Addr())
	name := t.Name()
	holder, _ := e.NewLocker(name)
	if err := holder.Lock(); err != nil {
		t.Fatal(err)
	}
	l, _ := e.NewLocker(name)
	pause(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := l.LockCtx(ctx); err != context.DeadlineExceeded {
		t.Errorf("LockCtx() with the server frozen = %v; want context.DeadlineExceeded", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("LockCtx() returned after %v; want about its 300ms deadline", d)
	}
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 15*time.Second, "only the holder's node left", func() bool {
		nodes, err := lockNodes(c, e.LockPath(name))
		return err == nil && len(nodes) == 1
	})
	if err := holder.Unlock(); err != nil {
		t.Fatal(err)
	}
	// The create sent during the freeze may reach the server only after
	// the check above; the engine deletes that node in the background. An
	// orphan left for good would keep this wait queued behind it (the
	// session lives on) until the deadline.
	lctx, lcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer lcancel()
	if err := l.LockCtx(lctx); err != nil {
		t.Fatalf("LockCtx() after the holder left = %v; want nil (nothing of the cancelled wait left)", err)
	}
	_ = l.Unlock()
}

// An Unlock that times out against a frozen server fails with
// ErrUnavailable; the node is deleted once the server is back, and the
// next owner gets the lock without waiting for the session to end.
func TestFailedReleaseDeletesLater(t *testing.T) {
	s := testserver.ZooKeeper(t)
	e := newEngine(t, []string{s.Addr()}, zk.WithSessionTimeout(20*time.Second), zk.WithConnectTimeout(10*time.Second))
	defer e.Close()
	other := newEngine(t, []string{s.Addr()}, zk.WithSessionTimeout(20*time.Second), zk.WithConnectTimeout(10*time.Second))
	defer other.Close()
	name := t.Name()
	a, _ := e.NewLocker(name, locker.WithReleaseTimeout(200*time.Millisecond))
	if err := a.Lock(); err != nil {
		t.Fatal(err)
	}
	pause(t, s)
	err := a.Unlock()
	if rerr := s.Resume(); rerr != nil {
		t.Fatal(rerr)
	}
	if !errors.Is(err, locker.ErrUnavailable) {
		t.Errorf("Unlock() against a frozen server = %v; want ErrUnavailable", err)
	}
	b, _ := other.NewLocker(name)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	if err := b.LockCtx(ctx); err != nil {
		t.Fatalf("LockCtx() after the failed Unlock = %v; want the node deleted in the background", err)
	}
	t.Logf("next owner got the lock %v after the server came back", time.Since(start))
	_ = b.Unlock()
}

// proxy forwards connections to a server, or, switched to silent, accepts
// them and never answers, like a server that is frozen or starting up.
type proxy struct {
	l      net.Listener
	target string
	silent atomic.Bool
	mu     sync.Mutex
	conns  []net.Conn
	wg     sync.WaitGroup
}

func newProxy(t *testing.T, target string) *proxy {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{l: l, target: target}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(func() {
		l.Close()
		p.drop()
		p.wg.Wait()
	})
	return p
}

func (p *proxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		p.track(c)
		if p.silent.Load() {
			continue // held open, never answered
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.track(s)
		for _, pair := range [][2]net.Conn{{c, s}, {s, c}} {
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				_, _ = io.Copy(pair[0], pair[1])
				pair[0].Close()
				pair[1].Close()
			}()
		}
	}
}

func (p *proxy) track(c net.Conn) {
	p.mu.Lock()
	p.conns = append(p.conns, c)
	p.mu.Unlock()
}

// drop closes every connection.
func (p *proxy) drop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// A server that accepts connections but does not answer them must not keep
// the engine from reconnecting once it serves again: the holds survive.
func TestSilentServerDoesNotStallReconnect(t *testing.T) {
	p := newProxy(t, zkAddr)
	const session = 6 * time.Second
	e := newEngine(t, []string{p.l.Addr().String()}, zk.WithSessionTimeout(session), zk.WithConnectTimeout(time.Second))
	defer e.Close()
	l, _ := e.NewLocker(t.Name())
	if err := l.Lock(); err != nil {
		t.Fatal(err)
	}
	sid := e.SessionID()
	p.silent.Store(true)
	p.drop()
	// The client reconnects into the silence (go-zookeeper waits a second
	// before it tries again).
	time.Sleep(1500 * time.Millisecond)
	p.silent.Store(false)
	waitFor(t, session, "the engine back with its session", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		return e.Ping(ctx) == nil
	})
	if got := e.SessionID(); got != sid {
		t.Errorf("session after the silence = %#x; want the same %#x", got, sid)
	}
	if isClosed(lease(l).Lost()) {
		t.Errorf("Lost() closed after a silence shorter than the session timeout")
	}
	if err := l.Unlock(); err != nil {
		t.Errorf("Unlock() = %v", err)
	}
}

// pause freezes s and waits until it no longer answers: SIGSTOP takes
// effect asynchronously.
func pause(t *testing.T, s *testserver.Server) {
	t.Helper()
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", s.Addr(), time.Second)
		if err != nil {
			t.Fatal(err)
		}
		_ = conn.SetDeadline(time.Now().Add(100 * time.Millisecond))
		_, _ = io.WriteString(conn, "ruok")
		_, err = conn.Read(make([]byte, 4))
		conn.Close()
		if err != nil {
			return // no answer: frozen
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still answers 5s after SIGSTOP", s)
		}
	}
}

// The fault suite: a server of its own per case, frozen or killed.
func TestFaults(t *testing.T) {
	lockertest.RunFaults(t, func(t *testing.T) lockertest.FaultHarness {
		s := testserver.ZooKeeper(t)
		c := admin(t, s.Addr())
		const connect = time.Second
		e := newEngine(t, []string{s.Addr()}, zk.WithConnectTimeout(connect), zk.WithSessionTimeout(10*time.Second))
		return lockertest.FaultHarness{
			Harness: lockertest.Harness{
				Engine: e,
				Residue: func(ctx context.Context, name string) (int, error) {
					nodes, err := lockNodes(c, e.LockPath(name))
					return max(len(nodes)-1, 0), err
				},
			},
			Pause:          func() error { pause(t, s); return nil },
			Resume:         s.Resume,
			Kill:           s.Kill,
			RequestTimeout: connect,
		}
	})
}

// TryLock on a frozen server, at the engine's defaults, returns
// ErrUnavailable within driver.DefaultRequestTimeout (it took the old
// default connect timeout, 5s).
func TestTryLockFrozenWithinRequestTimeout(t *testing.T) {
	s := testserver.ZooKeeper(t)
	e := newEngine(t, []string{s.Addr()})
	defer e.Close()
	lockertest.TryLockFrozen(t, e, s.Pause, s.Resume, driver.DefaultRequestTimeout)
}
