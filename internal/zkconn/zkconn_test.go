package zkconn_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	gozk "github.com/go-zookeeper/zk"

	"github.com/orthrus-go/orthrus/internal/freeport"
	"github.com/orthrus-go/orthrus/internal/testmain"
	"github.com/orthrus-go/orthrus/internal/testserver"
	"github.com/orthrus-go/orthrus/internal/zkconn"
)

var zkAddr string

func TestMain(m *testing.M) {
	testmain.Run(m, func() (func(), error) {
		s, err := testserver.NewZooKeeper()
		if err != nil {
			return nil, err
		}
		zkAddr = s.Addr()
		return func() { _ = s.Stop() }, nil
	})
}

func config(servers ...string) zkconn.Config {
	return zkconn.Config{
		Servers:        servers,
		SessionTimeout: 4 * time.Second,
		ConnectTimeout: 2 * time.Second,
		Logger:         slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
}

func dial(t *testing.T) *zkconn.Conn {
	t.Helper()
	c, err := zkconn.Dial(context.Background(), config(zkAddr))
	if err != nil {
		t.Fatalf("Dial(%s) = %v", zkAddr, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestDoAndClose(t *testing.T) {
	c := dial(t)
	ctx := context.Background()
	ok, err := zkconn.Do(ctx, c, func() (bool, error) {
		ok, _, err := c.Client().Exists("/")
		return ok, err
	})
	if !ok || err != nil {
		t.Fatalf("Do(Exists /) = %v, %v; want true, nil", ok, err)
	}
	if ep := c.Epoch(); ep == nil || ep.IsLost() {
		t.Errorf("Epoch() = %v; want a live epoch", ep)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close() = %v; want nil", err)
	}
	if _, err := zkconn.Do(ctx, c, func() (bool, error) { return true, nil }); !errors.Is(err, zkconn.ErrClosed) {
		t.Errorf("Do() after Close = %v; want ErrClosed", err)
	}
}

// A server that refuses every connection: Dial gives up within the connect
// timeout and says why.
func TestDialNoServer(t *testing.T) {
	ports, err := freeport.Loopback(1)
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	start := time.Now()
	c, err := zkconn.Dial(context.Background(), config(addr))
	if err == nil {
		_ = c.Close()
		t.Fatalf("Dial(%s) = nil error; want no session", addr)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Dial took %v; want about the connect timeout (2s)", took)
	}
}

func TestDialBadConfig(t *testing.T) {
	for _, cfg := range []zkconn.Config{config(), config(" "), {Servers: []string{zkAddr}}} {
		if c, err := zkconn.Dial(context.Background(), cfg); err == nil {
			_ = c.Close()
			t.Errorf("Dial(%+v) = nil error; want one", cfg)
		}
	}
}

func TestDoContext(t *testing.T) {
	c := dial(t)
	release := make(chan struct{})
	defer close(release)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := zkconn.Do(ctx, c, func() (int, error) { <-release; return 0, errors.New("late") })
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Do(cancelled) = %v; want context.Canceled while the request hangs", err)
	}
}

func TestCall(t *testing.T) {
	if v, err := zkconn.Call(context.Background(), func() (int, error) { return 7, nil }); v != 7 || err != nil {
		t.Errorf("Call() = %v, %v; want 7, nil", v, err)
	}
	release := make(chan struct{})
	defer close(release)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := zkconn.Call(ctx, func() (int, error) { <-release; return 0, errors.New("late") }); err != context.Canceled {
		t.Errorf("Call(cancelled) = %v; want context.Canceled while the request hangs", err)
	}
}

func TestRetryable(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{gozk.ErrConnectionClosed, true},
		{gozk.ErrNoServer, true},
		{fmt.Errorf("wrapped: %w", gozk.ErrNoNode), false},
		{gozk.ErrBadVersion, false},
		{gozk.ErrNoAuth, false},
		{context.Canceled, false},
		{zkconn.ErrClosed, false},
	} {
		if got := zkconn.Retryable(tc.err); got != tc.want {
			t.Errorf("Retryable(%v) = %v; want %v", tc.err, got, tc.want)
		}
	}
}

// Protected nodes: FindProtected finds a node by its guid, keeps the
// lowest, and the reaper deletes the others.
func TestFindProtectedAndReap(t *testing.T) {
	c := dial(t)
	ctx := context.Background()
	parent := "/" + t.Name()
	acl := gozk.WorldACL(gozk.PermAll)
	if _, err := c.Client().Create(parent, nil, 0, acl); err != nil {
		t.Fatal(err)
	}
	defer c.Client().Delete(parent, -1)
	guid := zkconn.NewGUID()
	if got, err := c.FindProtected(ctx, parent, guid); got != "" || err != nil {
		t.Fatalf("FindProtected() before any node = %q, %v; want \"\", nil", got, err)
	}
	name := parent + "/" + zkconn.ProtectedPrefix + guid + "-n-"
	first, err1 := c.Client().Create(name, nil, gozk.FlagEphemeral|gozk.FlagSequence, acl)
	dup, err2 := c.Client().Create(name, nil, gozk.FlagEphemeral|gozk.FlagSequence, acl)
	if err := errors.Join(err1, err2); err != nil {
		t.Fatal(err)
	}
	if got, err := c.FindProtected(ctx, parent, guid); got != first || err != nil {
		t.Fatalf("FindProtected() = %q, %v; want %q, nil", got, err, first)
	}
	// The reaper deletes the duplicate: a watch sees it go.
	ok, _, deleted, err := c.Client().ExistsW(dup)
	if err != nil {
		t.Fatalf("ExistsW(%s) = %v", dup, err)
	}
	if ok {
		select {
		case ev := <-deleted:
			if ev.Type != gozk.EventNodeDeleted {
				t.Fatalf("watch on the duplicate = %v; want its deletion", ev)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("duplicate %s still there after 10s", dup)
		}
	}
	c.ReapProtected(parent, guid)
	if unsure, err := c.Delete(ctx, first, -1); err != nil && !errors.Is(err, gozk.ErrNoNode) {
		t.Fatalf("Delete(%s) = %v, %v", first, unsure, err)
	}
}

func TestCheckPath(t *testing.T) {
	for _, tc := range []struct {
		path string
		ok   bool
	}{
		{"/a", true},
		{"/myapp/locks", true},
		{"/é/ü", true},
		{"a", false},
		{"", false},
		{"/", false},
		{"/a/", false},
		{"/a//b", false},
		{"/a/./b", false},
		{"/a/../b", false},
		{"/zookeeper", false},
		{"/zookeeper/quota", false},
		{"/zookeeperish", true},
		{"/a\x00b", false},
		{"/a\x01", false},
		{"/\xff", false},
		{"/a\uffff", false},
	} {
		if err := zkconn.CheckPath(tc.path); (err == nil) != tc.ok {
			t.Errorf("CheckPath(%q) = %v; want ok %v", tc.path, err, tc.ok)
		}
	}
}

func TestAncestors(t *testing.T) {
	got := fmt.Sprint(zkconn.Ancestors("/a/b/c"))
	if want := "[/a /a/b]"; got != want {
		t.Errorf("Ancestors(/a/b/c) = %s; want %s", got, want)
	}
	if got := zkconn.Ancestors("/a"); len(got) != 0 {
		t.Errorf("Ancestors(/a) = %v; want none", got)
	}
}
