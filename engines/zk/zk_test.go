package zk_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	gozk "github.com/go-zookeeper/zk"

	"github.com/orthrus-go/orthrus/engines/zk"
	"github.com/orthrus-go/orthrus/internal/testmain"
	"github.com/orthrus-go/orthrus/internal/testserver"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/driver"
	"github.com/orthrus-go/orthrus/locker/inspect"
	"github.com/orthrus-go/orthrus/locker/lockertest"
	"github.com/orthrus-go/orthrus/locker/observe"
)

// The standalone server shared by the package's tests and examples.
var (
	standalone *testserver.Server
	zkAddr     string
)

func TestMain(m *testing.M) {
	testmain.Run(m, func() (func(), error) {
		s, err := testserver.NewZooKeeper()
		if err != nil {
			return nil, err
		}
		standalone, zkAddr = s, s.Addr()
		return func() { _ = s.Stop() }, nil
	})
}

// quiet keeps expected warnings (lost holds in fault tests) out of the
// test output.
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// newEngine makes an engine for a test. New waits for the first session at
// most the connect timeout (2s with one server); a JVM starved by the rest
// of a loaded test run can miss that now and then, which is not what these
// tests judge (fault_test.go does), so an unavailable ensemble gets two more
// tries.
func newEngine(t testing.TB, servers []string, opts ...zk.Option) *zk.Engine {
	t.Helper()
	opts = append([]zk.Option{zk.WithLogger(quiet)}, opts...)
	var err error
	for range newEngineTries {
		var e *zk.Engine
		if e, err = zk.New(servers, opts...); err == nil {
			return e
		}
		if !errors.Is(err, locker.ErrUnavailable) {
			break
		}
		t.Logf("New(%q) = %v; trying again", servers, err)
	}
	t.Fatalf("New(%q) = %v", servers, err)
	return nil
}

const newEngineTries = 3

// admin is a plain go-zookeeper connection that plays the operator or
// another application.
func admin(t testing.TB, servers ...string) *gozk.Conn {
	t.Helper()
	if len(servers) == 0 {
		servers = []string{zkAddr}
	}
	c, _, err := gozk.Connect(servers, 10*time.Second, gozk.WithLogger(silent{}), gozk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	deadline := time.Now().Add(20 * time.Second)
	for c.State() != gozk.StateHasSession {
		if time.Now().After(deadline) {
			t.Fatalf("admin connection to %q: no session", servers)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The session comes before go-zookeeper starts its receive loop: a
	// round trip makes sure the loop runs before a leak check begins.
	if _, _, err := c.Exists("/"); err != nil {
		t.Fatalf("admin connection to %q: %v", servers, err)
	}
	return c
}

type silent struct{}

func (silent) Printf(string, ...any) {}

// lockNodes returns the lock nodes under parent, first (the holder) first.
func lockNodes(c *gozk.Conn, parent string) ([]string, error) {
	children, _, err := c.Children(parent)
	if errors.Is(err, gozk.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	sort.Slice(children, func(i, j int) bool { return seq(children[i]) < seq(children[j]) })
	return children, nil
}

func seq(name string) int {
	n, _ := strconv.Atoi(name[max(len(name)-10, 0):])
	return n
}

func harness(t *testing.T, c *gozk.Conn, opts ...zk.Option) lockertest.Harness {
	return harnessAt(t, zkAddr, c, opts...)
}

// harnessAt is harness with the engine connected to addr.
func harnessAt(t *testing.T, addr string, c *gozk.Conn, opts ...zk.Option) lockertest.Harness {
	causes := &lockertest.Causes{}
	e := newEngine(t, []string{addr}, append([]zk.Option{zk.WithPrefix("/conformance"), zk.WithObserver(causes)}, opts...)...)
	return lockertest.Harness{
		Engine: e,
		Causes: causes,
		// A hold's node is the one created at its token.
		Delete: func(ctx context.Context, kind inspect.Kind, name string, token uint64) error {
			parent := e.LockPath(name)
			if kind != inspect.KindMutex {
				parent = e.FamilyPath(kind, name)
			}
			children, _, err := c.Children(parent)
			if err != nil {
				return err
			}
			for _, child := range children {
				if _, st, err := c.Get(parent + "/" + child); err == nil && uint64(st.Czxid) == token {
					return c.Delete(parent+"/"+child, -1)
				}
			}
			return fmt.Errorf("no node under %s created at %d", parent, token)
		},
		NoticeDeleted: 2 * time.Second,
		Expire: func(ctx context.Context, name string) error {
			nodes, err := lockNodes(c, e.LockPath(name))
			if err != nil {
				return err
			}
			if len(nodes) == 0 {
				return fmt.Errorf("no node under %s", e.LockPath(name))
			}
			return c.Delete(e.LockPath(name)+"/"+nodes[0], -1)
		},
		Residue: func(ctx context.Context, name string) (int, error) {
			nodes, err := lockNodes(c, e.LockPath(name))
			return max(len(nodes)-1, 0), err
		},
	}
}

func TestConformance(t *testing.T) {
	c := admin(t)
	lockertest.Run(t, func(t *testing.T) lockertest.Harness { return harness(t, c) })
}

func TestConformanceWithAuth(t *testing.T) {
	c := admin(t)
	if err := c.AddAuth("digest", []byte("conformance:secret")); err != nil {
		t.Fatal(err)
	}
	lockertest.Run(t, func(t *testing.T) lockertest.Harness {
		return harness(t, c, zk.WithAuth("digest", "conformance:secret"), zk.WithPrefix("/conformance-auth"))
	})
}

func TestNewRejectsBadInput(t *testing.T) {
	for _, tc := range []struct {
		desc    string
		servers []string
		opt     zk.Option
		want    string
	}{
		{"no servers", nil, zk.WithName("x"), "no servers"},
		{"empty server", []string{""}, zk.WithName("x"), "empty server"},
		{"empty name", []string{zkAddr}, zk.WithName(""), "WithName"},
		{"empty prefix", []string{zkAddr}, zk.WithPrefix(""), "WithPrefix"},
		{"root prefix", []string{zkAddr}, zk.WithPrefix("/"), "WithPrefix"},
		{"trailing slash", []string{zkAddr}, zk.WithPrefix("/a/"), "WithPrefix"},
		{"empty element", []string{zkAddr}, zk.WithPrefix("/a//b"), "WithPrefix"},
		{"relative element", []string{zkAddr}, zk.WithPrefix("/a/../b"), "WithPrefix"},
		{"control character", []string{zkAddr}, zk.WithPrefix("/a\tb"), "WithPrefix"},
		{"zookeeper's own", []string{zkAddr}, zk.WithPrefix("/zookeeper/locks"), "WithPrefix"},
		{"zero session timeout", []string{zkAddr}, zk.WithSessionTimeout(0), "WithSessionTimeout"},
		{"negative connect timeout", []string{zkAddr}, zk.WithConnectTimeout(-time.Second), "WithConnectTimeout"},
		{"empty auth scheme", []string{zkAddr}, zk.WithAuth("", "a:b"), "WithAuth"},
		{"empty credentials", []string{zkAddr}, zk.WithAuth("digest", ""), "WithAuth"},
		{"digest without password", []string{zkAddr}, zk.WithAuth("digest", "user"), "WithAuth"},
		{"nil logger", []string{zkAddr}, zk.WithLogger(nil), "WithLogger"},
		{"negative parent linger", []string{zkAddr}, zk.WithParentLinger(-time.Second), "WithParentLinger"},
		{"nil option", []string{zkAddr}, nil, "nil Option"},
	} {
		e, err := zk.New(tc.servers, tc.opt)
		if !errors.Is(err, locker.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%s) = %v; want ErrInvalidArgument naming %s", tc.desc, err, tc.want)
		}
		if e != nil {
			e.Close()
		}
	}
}

func TestPrefixWithoutLeadingSlash(t *testing.T) {
	e := newEngine(t, []string{zkAddr}, zk.WithPrefix("app/locks"))
	defer e.Close()
	if got, want := e.LockPath("x"), "/app/locks/x"; got != want {
		t.Errorf("LockPath(\"x\") = %q; want %q", got, want)
	}
	l, _ := e.NewLocker("x")
	if ok, err := l.TryLock(); !ok || err != nil {
		t.Fatalf("TryLock() = %v, %v; want true, nil", ok, err)
	}
	_ = l.Unlock()
}

// Java's PathUtils.validatePath, on UTF-16 code units, for one node name.
func javaValidName(name string) error {
	if name == "" || name == "." || name == ".." {
		return fmt.Errorf("relative or empty name %q", name)
	}
	for _, r := range name {
		if r == '/' {
			return errors.New("contains '/'")
		}
		if r > 0xffff {
			return fmt.Errorf("%U is written as surrogates, which ZooKeeper rejects", r)
		}
		if r <= 0x1f || (r >= 0x7f && r <= 0x9f) || (r >= 0xd800 && r <= 0xf8ff) || (r >= 0xfff0 && r <= 0xffff) {
			return fmt.Errorf("character %U", r)
		}
	}
	return nil
}

func unescape(s string) (string, error) {
	var b []byte
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b = append(b, s[i])
			continue
		}
		if i+2 >= len(s) {
			return "", fmt.Errorf("truncated escape in %q", s)
		}
		v, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
		if err != nil {
			return "", err
		}
		b = append(b, byte(v))
		i += 2
	}
	return string(b), nil
}

func TestEscapeName(t *testing.T) {
	names := []string{
		"plain", "a/b", "a%2Fb", "%", "%%", ".", "..", "...", ".a", "a.", "/", "//",
		"\t", "\x01\x1f", "\x7f", "\u0085", "\u009f", "\u00a0", "\ud7ff", "\ue000", "\uf8ff", "\uf900",
		"\ufeff", "\ufff0", "\ufffd", "\uffff", "😀", "zookeeper", "a b", "ünï/cødé", "{tag}",
	}
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 2000; i++ {
		var b strings.Builder
		for n := r.IntN(12); n > 0; n-- {
			switch r.IntN(4) {
			case 0:
				b.WriteByte(byte(1 + r.IntN(127)))
			case 1:
				b.WriteRune(rune(r.IntN(0x110000)))
			default:
				b.WriteString([]string{"/", "%", ".", "a", "\u0085", "\uffff", "😀"}[r.IntN(7)])
			}
		}
		if s := strings.ToValidUTF8(b.String(), "?"); s != "" && !strings.Contains(s, "\x00") {
			names = append(names, s)
		}
	}
	seen := make(map[string]string)
	for _, name := range names {
		got := zk.EscapeName(name)
		if err := javaValidName(got); err != nil {
			t.Errorf("EscapeName(%q) = %q, which ZooKeeper rejects: %v", name, got, err)
		}
		back, err := unescape(got)
		if err != nil || back != name {
			t.Errorf("unescape(EscapeName(%q)) = %q, %v; want the name back", name, back, err)
		}
		if other, ok := seen[got]; ok && other != name {
			t.Errorf("EscapeName(%q) = EscapeName(%q) = %q", name, other, got)
		}
		seen[got] = name
		for _, r := range name {
			if !utf8.ValidRune(r) {
				continue
			}
			if zk.LegalRune(r) && javaValidName(string(r)) != nil && r != '/' && r != '.' {
				t.Errorf("LegalRune(%U) = true; ZooKeeper rejects it", r)
			}
		}
	}
}

// Names the server must accept once escaped, each its own lock.
func TestOddNamesOnServer(t *testing.T) {
	e := newEngine(t, []string{zkAddr})
	defer e.Close()
	odd := []string{".", "..", "...", "\x7f", "\u0085", "\ue000", "\uf8ff", "\ufff0", "\ufffd", "\uffff", "😀", "zookeeper", "%", "%25", "a/../b", "\x01"}
	held := make([]locker.Locker, len(odd))
	for i, n := range odd {
		l, err := e.NewLocker(t.Name() + n)
		if err != nil {
			t.Fatalf("NewLocker(%q) = %v", n, err)
		}
		if ok, err := l.TryLock(); !ok || err != nil {
			t.Fatalf("TryLock() on %q = %v, %v; want true, nil", n, ok, err)
		}
		held[i] = l
	}
	for _, l := range held {
		if err := l.Unlock(); err != nil {
			t.Errorf("Unlock() = %v", err)
		}
	}
}

// Waiters are granted the lock in the order they queued.
func TestFIFO(t *testing.T) {
	c := admin(t)
	e := newEngine(t, []string{zkAddr})
	defer e.Close()
	name := t.Name()
	parent := e.LockPath(name)
	holder, _ := e.NewLocker(name)
	if err := holder.Lock(); err != nil {
		t.Fatal(err)
	}
	const waiters = 6
	order := make(chan int, waiters)
	errs := make(chan error, waiters)
	lockers := make([]locker.Locker, waiters)
	for i := range lockers {
		lockers[i], _ = e.NewLocker(name)
		go func() {
			if err := lockers[i].Lock(); err != nil {
				errs <- err
				return
			}
			order <- i
			errs <- lockers[i].Unlock()
		}()
		// The next waiter starts once this one is queued.
		waitFor(t, 10*time.Second, fmt.Sprintf("waiter %d queued", i), func() bool {
			nodes, err := lockNodes(c, parent)
			return err == nil && len(nodes) == i+2
		})
	}
	if err := holder.Unlock(); err != nil {
		t.Fatal(err)
	}
	for want := 0; want < waiters; want++ {
		if got := <-order; got != want {
			t.Errorf("grant %d went to waiter %d; want %d", want, got, want)
		}
	}
	for i := 0; i < waiters; i++ {
		if err := <-errs; err != nil {
			t.Errorf("waiter: %v", err)
		}
	}
}

// waitFor polls cond until it holds or d passes.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not true after %v", what, d)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// fourLetter sends a ZooKeeper four-letter word.
func fourLetter(addr, cmd string) (string, error) {
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(conn, cmd); err != nil {
		return "", err
	}
	b, err := io.ReadAll(conn)
	return string(b), err
}

// watchers parses wchp: the sessions watching each path.
func watchers(addr string) (map[string]map[string]bool, error) {
	out, err := fourLetter(addr, "wchp")
	if err != nil {
		return nil, err
	}
	m := make(map[string]map[string]bool)
	path := ""
	for _, line := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(line, "/"):
			path = strings.TrimSpace(line)
			m[path] = make(map[string]bool)
		case strings.TrimSpace(line) != "" && path != "":
			m[path][strings.TrimSpace(line)] = true
		}
	}
	return m, nil
}

// Each waiter watches only the node before its own: a release or a
// cancelled waiter in the middle concerns one waiter, not all.
func TestWaitersWatchOnlyPredecessor(t *testing.T) {
	c := admin(t)
	name := t.Name()
	const owners = 5
	engines := make([]*zk.Engine, owners)
	lockers := make([]locker.Locker, owners)
	for i := range engines {
		engines[i] = newEngine(t, []string{zkAddr})
		defer engines[i].Close()
		lockers[i], _ = engines[i].NewLocker(name)
	}
	parent := engines[0].LockPath(name)
	if err := lockers[0].Lock(); err != nil {
		t.Fatal(err)
	}
	ctxs := make([]context.CancelFunc, owners)
	done := make([]chan error, owners)
	for i := 1; i < owners; i++ {
		ctx, cancel := context.WithCancel(context.Background())
		ctxs[i], done[i] = cancel, make(chan error, 1)
		defer cancel()
		go func() { done[i] <- lockers[i].LockCtx(ctx) }()
		waitFor(t, 10*time.Second, fmt.Sprintf("waiter %d queued", i), func() bool {
			nodes, err := lockNodes(c, parent)
			return err == nil && len(nodes) == i+1
		})
	}
	session := func(i int) string { return fmt.Sprintf("0x%x", engines[i].SessionID()) }
	// check waits until every node but the last is watched by the owner of
	// the next node, and by no one else, except the one-shot watch a
	// cancelled waiter leaves on the node it watched (stale: owner of the
	// node -> cancelled owner), and the owner's own (set when a hold is
	// renewed).
	check := func(queue []int, stale map[int]int) {
		t.Helper()
		var last string
		ok := func() bool {
			nodes, err := lockNodes(c, parent)
			if err != nil || len(nodes) != len(queue) {
				last = fmt.Sprintf("nodes %v, %v", nodes, err)
				return false
			}
			w, err := watchers(zkAddr)
			if err != nil {
				last = err.Error()
				return false
			}
			for k, n := range nodes {
				want := map[string]bool{}
				if k+1 < len(queue) {
					want[session(queue[k+1])] = true
				}
				if s, ok := stale[queue[k]]; ok {
					want[session(s)] = true
				}
				got := maps.Clone(w[parent+"/"+n])
				delete(got, session(queue[k]))
				same := len(got) == len(want)
				for s := range want {
					same = same && got[s]
				}
				if !same {
					last = fmt.Sprintf("node %d (owner %d) watched by %v; want %v", k, queue[k], got, want)
					return false
				}
			}
			return true
		}
		deadline := time.Now().Add(10 * time.Second)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("watches: %s", last)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	check([]int{0, 1, 2, 3, 4}, nil)
	// A waiter in the middle gives up: only its successor moves its watch.
	ctxs[2]()
	if err := <-done[2]; err != context.Canceled {
		t.Fatalf("LockCtx() of the cancelled waiter = %v; want context.Canceled", err)
	}
	check([]int{0, 1, 3, 4}, map[int]int{1: 2})
	// A release wakes the first waiter only.
	if err := lockers[0].Unlock(); err != nil {
		t.Fatal(err)
	}
	if err := <-done[1]; err != nil {
		t.Fatalf("LockCtx() of the first waiter = %v", err)
	}
	check([]int{1, 3, 4}, map[int]int{1: 2})
	select {
	case err := <-done[3]:
		t.Fatalf("waiter 3 returned %v while waiter 1 holds", err)
	default:
	}
	for _, i := range []int{1, 3, 4} {
		if i != 1 {
			if err := <-done[i]; err != nil {
				t.Fatalf("LockCtx() of waiter %d = %v", i, err)
			}
		}
		if err := lockers[i].Unlock(); err != nil {
			t.Fatalf("Unlock() of %d = %v", i, err)
		}
	}
}

// A create whose reply is lost is found again by its guid: the engine
// queues one node, not two, and no orphan stays behind.
func TestLostCreateReplyFindsNode(t *testing.T) {
	c := admin(t)
	e := newEngine(t, []string{zkAddr})
	defer e.Close()
	var mu sync.Mutex
	var created []string
	e.SetAfterCreate(func(path string) error {
		mu.Lock()
		defer mu.Unlock()
		created = append(created, path)
		if len(created) == 1 {
			return gozk.ErrConnectionClosed // the reply is "lost"
		}
		return nil
	})
	name := t.Name()
	a, _ := e.NewLocker(name)
	if err := a.Lock(); err != nil {
		t.Fatalf("Lock() = %v", err)
	}
	nodes, err := lockNodes(c, e.LockPath(name))
	if err != nil || len(nodes) != 1 {
		t.Fatalf("nodes under the lock = %v, %v; want exactly one", nodes, err)
	}
	mu.Lock()
	if len(created) != 1 || created[0] != e.LockPath(name)+"/"+nodes[0] {
		t.Errorf("creates = %v; want one, of %s", created, nodes[0])
	}
	mu.Unlock()
	if err := a.Unlock(); err != nil {
		t.Fatalf("Unlock() = %v", err)
	}
	if nodes, _ := lockNodes(c, e.LockPath(name)); len(nodes) != 0 {
		t.Errorf("nodes after Unlock = %v; want none", nodes)
	}
}

func TestFindOwn(t *testing.T) {
	c := admin(t)
	e := newEngine(t, []string{zkAddr})
	defer e.Close()
	ctx := context.Background()
	parent := e.LockPath(t.Name())
	if _, err := c.Create(parent, nil, 0, gozk.WorldACL(gozk.PermAll)); err != nil {
		t.Fatal(err)
	}
	defer c.Delete(parent, -1)
	const guid = "0123456789abcdef0123456789abcdef"
	if got, err := e.FindOwn(ctx, parent, guid); got != "" || err != nil {
		t.Fatalf("FindOwn() before any node = %q, %v; want \"\", nil", got, err)
	}
	other, _ := c.Create(parent+"/"+zk.ProtectedPrefix+"fedcba9876543210fedcba9876543210-lock-", nil, gozk.FlagEphemeral|gozk.FlagSequence, gozk.WorldACL(gozk.PermAll))
	mine, _ := c.Create(parent+"/"+zk.ProtectedPrefix+guid+"-lock-", nil, gozk.FlagEphemeral|gozk.FlagSequence, gozk.WorldACL(gozk.PermAll))
	defer c.Delete(other, -1)
	if got, err := e.FindOwn(ctx, parent, guid); got != mine || err != nil {
		t.Fatalf("FindOwn() = %q, %v; want %q, nil", got, err, mine)
	}
	if got, err := e.FindOwn(ctx, parent+"-missing", guid); got != "" || err != nil {
		t.Fatalf("FindOwn() under a missing parent = %q, %v; want \"\", nil", got, err)
	}
	// A duplicate is deleted, the first kept.
	dup, _ := c.Create(parent+"/"+zk.ProtectedPrefix+guid+"-lock-", nil, gozk.FlagEphemeral|gozk.FlagSequence, gozk.WorldACL(gozk.PermAll))
	if got, err := e.FindOwn(ctx, parent, guid); got != mine || err != nil {
		t.Fatalf("FindOwn() with a duplicate = %q, %v; want %q, nil", got, err, mine)
	}
	waitFor(t, 10*time.Second, "duplicate deleted", func() bool {
		ok, _, err := c.Exists(dup)
		return err == nil && !ok
	})
	_ = c.Delete(mine, -1)
}

// Lock parents are container nodes: the server deletes them once empty,
// so parents of names no longer used do not pile up.
func TestEmptyParentsGo(t *testing.T) {
	// The container sweep runs every minute by default; ZooKeeper reads
	// its interval from a JVM system property only.
	t.Setenv("JAVA_TOOL_OPTIONS", "-Dznode.container.checkIntervalMs=100")
	s := testserver.ZooKeeper(t)
	c := admin(t, s.Addr())
	e := newEngine(t, []string{s.Addr()})
	defer e.Close()
	l, _ := e.NewLocker(t.Name())
	if err := l.Lock(); err != nil {
		t.Fatal(err)
	}
	parent := e.LockPath(t.Name())
	if ok, _, err := c.Exists(parent); !ok || err != nil {
		t.Fatalf("Exists(parent) while held = %v, %v; want true, nil", ok, err)
	}
	if err := l.Unlock(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "empty parent deleted", func() bool {
		ok, _, err := c.Exists(parent)
		return err == nil && !ok
	})
	// The next acquisition makes it again.
	if err := l.Lock(); err != nil {
		t.Fatalf("Lock() after the parent went = %v", err)
	}
	if err := l.Unlock(); err != nil {
		t.Fatal(err)
	}
}

// With credentials, lock nodes carry CREATOR_ALL: a client without them
// can neither delete a held node nor take the lock, one with them can.
func TestACL(t *testing.T) {
	const cred = "app:s3cret"
	e := newEngine(t, []string{zkAddr}, zk.WithAuth("digest", cred), zk.WithPrefix("/acl-test"))
	defer e.Close()
	name := t.Name()
	l, _ := e.NewLocker(name)
	if err := l.Lock(); err != nil {
		t.Fatal(err)
	}
	parent := e.LockPath(name)
	stranger := admin(t)
	// The parent denies even listing to strangers; the owner's view tells
	// the node's path.
	owner := admin(t)
	if err := owner.AddAuth("digest", []byte(cred)); err != nil {
		t.Fatal(err)
	}
	nodes, err := lockNodes(owner, parent)
	if err != nil || len(nodes) != 1 {
		t.Fatalf("nodes seen with the credentials = %v, %v; want one", nodes, err)
	}
	if _, _, err := stranger.Children(parent); !errors.Is(err, gozk.ErrNoAuth) {
		t.Errorf("Children() without credentials = %v; want ErrNoAuth", err)
	}
	if err := stranger.Delete(parent+"/"+nodes[0], -1); !errors.Is(err, gozk.ErrNoAuth) {
		t.Errorf("Delete() of the held node without credentials = %v; want ErrNoAuth", err)
	}
	select {
	case <-l.Lost():
		t.Fatal("Lost() closed after a refused delete")
	default:
	}
	acl, _, err := owner.GetACL(parent + "/" + nodes[0])
	if err != nil || len(acl) != 1 || acl[0].Scheme != "digest" || !strings.HasPrefix(acl[0].ID, "app:") || acl[0].Perms != gozk.PermAll {
		t.Errorf("ACL of the node = %+v, %v; want digest app:... with all permissions", acl, err)
	}
	// Another engine with the same credentials queues; one without cannot.
	same := newEngine(t, []string{zkAddr}, zk.WithAuth("digest", cred), zk.WithPrefix("/acl-test"))
	defer same.Close()
	if ok, err := must(same.NewLocker(name)).TryLock(); ok || err != nil {
		t.Errorf("TryLock() with the credentials while held = %v, %v; want false, nil", ok, err)
	}
	open := newEngine(t, []string{zkAddr}, zk.WithPrefix("/acl-test"))
	defer open.Close()
	if ok, err := must(open.NewLocker(name)).TryLock(); ok || !errors.Is(err, locker.ErrPermission) || !errors.Is(err, gozk.ErrNoAuth) {
		t.Errorf("TryLock() without credentials = %v, %v; want false, ErrPermission wrapping ErrNoAuth", ok, err)
	}
	if err := l.Unlock(); err != nil {
		t.Fatal(err)
	}
}

func must(l locker.Locker, err error) locker.Locker {
	if err != nil {
		panic(err)
	}
	return l
}

// Re-entry costs no round trip and keeps the token.
func TestTokenIsCzxid(t *testing.T) {
	c := admin(t)
	e := newEngine(t, []string{zkAddr})
	defer e.Close()
	l, _ := e.NewLocker(t.Name())
	if err := l.Lock(); err != nil {
		t.Fatal(err)
	}
	defer l.Unlock()
	nodes, _ := lockNodes(c, e.LockPath(t.Name()))
	if len(nodes) != 1 {
		t.Fatalf("nodes = %v; want one", nodes)
	}
	data, st, err := c.Get(e.LockPath(t.Name()) + "/" + nodes[0])
	if err != nil {
		t.Fatal(err)
	}
	if got := l.Token(); got != uint64(st.Czxid) {
		t.Errorf("Token() = %d; want the node's czxid %d", got, st.Czxid)
	}
	if st.EphemeralOwner != e.SessionID() {
		t.Errorf("node's ephemeralOwner = %#x; want the engine's session %#x", st.EphemeralOwner, e.SessionID())
	}
	if !strings.Contains(string(data), ":") {
		t.Errorf("node data = %q; want the owner ID (host:pid:random)", data)
	}
}

// A hold's node deleted by someone else is reported at once, by a watch on
// the node set when the hold is granted: for a fixed lease and, with the
// default TTL, a renewed hold alike; and after a change of the node's data,
// which used the watch up and has it set again.
func TestDeletedNodeReportsLost(t *testing.T) {
	c := admin(t)
	causes := &lockertest.Causes{}
	e := newEngine(t, []string{zkAddr}, zk.WithObserver(causes))
	defer e.Close()
	for _, tc := range []struct {
		desc   string
		opt    locker.Option
		change bool
	}{
		{"fixed lease", locker.WithLease(time.Hour), false},
		{"renewed", locker.WithTTL(driver.DefaultTTL), false},
		{"data changed", locker.WithTTL(driver.DefaultTTL), true},
	} {
		name := t.Name() + "/" + tc.desc
		l, _ := e.NewLocker(name, tc.opt)
		if err := l.Lock(); err != nil {
			t.Fatal(err)
		}
		nodes, _ := lockNodes(c, e.LockPath(name))
		if len(nodes) != 1 {
			t.Fatalf("%s: nodes = %v; want one", tc.desc, nodes)
		}
		path := e.LockPath(name) + "/" + nodes[0]
		session := fmt.Sprintf("0x%x", e.SessionID())
		watched := func() bool {
			w, err := watchers(zkAddr)
			return err == nil && w[path][session]
		}
		waitFor(t, 2*time.Second, tc.desc+": the holder watches its node", watched)
		if tc.change {
			if _, err := c.Set(path, []byte("changed by hand"), -1); err != nil {
				t.Fatal(err)
			}
			waitFor(t, 2*time.Second, tc.desc+": the holder watches its node again", watched)
		}
		if err := c.Delete(path, -1); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		select {
		case <-lease(l).Lost():
			if d := time.Since(start); d > time.Second {
				t.Errorf("%s: Lost() closed %v after the deletion; want at once", tc.desc, d)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: Lost() not closed 5s after the node was deleted", tc.desc)
		}
		if got, _ := causes.Of(lease(l).Token()); got != observe.LostGone {
			t.Errorf("%s: the hold ended with cause %q; want %q", tc.desc, got, observe.LostGone)
		}
		if err := l.Unlock(); !errors.Is(err, locker.ErrLockLost) {
			t.Errorf("%s: Unlock() = %v; want ErrLockLost", tc.desc, err)
		}
	}
}

// The engine deletes a lock's parent soon after its last node under it
// went, without waiting for the server's container reaper (every minute).
func TestEngineDeletesEmptyParents(t *testing.T) {
	c := admin(t)
	e := newEngine(t, []string{zkAddr}, zk.WithPrefix("/parents"), zk.WithParentLinger(100*time.Millisecond))
	defer e.Close()
	const n = 50
	base := fmt.Sprintf("%s-%d-", t.Name(), time.Now().UnixNano())
	for i := range n {
		l, _ := e.NewLocker(fmt.Sprint(base, i))
		if err := l.Lock(); err != nil {
			t.Fatal(err)
		}
		if err := l.Unlock(); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 10*time.Second, "every empty parent deleted", func() bool {
		children, _, err := c.Children("/parents")
		if err != nil {
			return false
		}
		for _, ch := range children {
			if strings.HasPrefix(ch, base) {
				return false
			}
		}
		return true
	})
}

// A parent in use by another engine is never deleted under it, and two
// engines that delete the parent after every release, while they take the
// name in turns, still exclude each other and never fail.
func TestParentDeleteRacesNoAcquisition(t *testing.T) {
	c := admin(t)
	name := fmt.Sprintf("%s-%d", t.Name(), time.Now().UnixNano())
	a := newEngine(t, []string{zkAddr}, zk.WithPrefix("/parents"), zk.WithParentLinger(time.Nanosecond))
	defer a.Close()
	b := newEngine(t, []string{zkAddr}, zk.WithPrefix("/parents"), zk.WithParentLinger(time.Nanosecond))
	defer b.Close()

	la, _ := a.NewLocker(name)
	lb, _ := b.NewLocker(name)
	if err := la.Lock(); err != nil {
		t.Fatal(err)
	}
	if err := la.Unlock(); err != nil {
		t.Fatal(err)
	}
	if err := lb.Lock(); err != nil {
		t.Fatal(err)
	}
	// a's delete, due at once, finds b's node (or a newer version).
	time.Sleep(200 * time.Millisecond)
	if ok, _, err := c.Exists(a.LockPath(name)); !ok || err != nil {
		t.Errorf("Exists(parent) while another engine holds = %v, %v; want true, nil", ok, err)
	}
	if err := lb.Unlock(); err != nil {
		t.Fatal(err)
	}

	var inside, overlaps atomic.Int32
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for _, l := range []locker.Locker{la, lb} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				if err := l.Lock(); err != nil {
					errs <- err
					return
				}
				if inside.Add(1) > 1 {
					overlaps.Add(1)
				}
				inside.Add(-1)
				if err := l.Unlock(); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("Lock/Unlock while parents are deleted = %v; want nil", err)
	}
	if n := overlaps.Load(); n > 0 {
		t.Errorf("%d overlapping holds; want none", n)
	}
}
