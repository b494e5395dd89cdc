package zksource_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	gozk "github.com/go-zookeeper/zk"

	"github.com/orthrus-go/orthrus/internal/testmain"
	"github.com/orthrus-go/orthrus/internal/testserver"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/switcher"
	"github.com/orthrus-go/orthrus/switcher/sourcetest"
	"github.com/orthrus-go/orthrus/switcher/zksource"
)

// zkAddr is the ZooKeeper shared by the tests and examples; tests that
// break their server start one of their own.
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

type quiet struct{}

func (quiet) Printf(string, ...any) {}

// connect returns a connection with a session, closed when the test ends.
func connect(t testing.TB, addr string) *gozk.Conn {
	t.Helper()
	conn, events, err := gozk.Connect([]string{addr}, 2*time.Second, gozk.WithLogger(quiet{}), gozk.WithLogInfo(false))
	if err != nil {
		t.Fatalf("Connect(%q) = %v", addr, err)
	}
	t.Cleanup(conn.Close)
	deadline := time.After(10 * time.Second)
	for {
		select {
		case ev := <-events:
			if ev.State == gozk.StateHasSession {
				go drain(events)
				return conn
			}
		case <-deadline:
			t.Fatalf("no session with %s within 10s", addr)
		}
	}
}

// drain consumes session events until the connection is closed.
func drain(events <-chan gozk.Event) {
	for range events {
	}
}

func newSource(t testing.TB, conn *gozk.Conn, path string) *zksource.Source {
	t.Helper()
	src, err := zksource.New(conn, path)
	if err != nil {
		t.Fatalf("New(%q) = %v", path, err)
	}
	return src
}

func set(t *testing.T, src *zksource.Source, engine string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := src.Set(ctx, engine); err != nil {
		t.Fatalf("Set(%q) = %v", engine, err)
	}
}

func TestNewInvalid(t *testing.T) {
	conn := connect(t, zkAddr)
	for _, tc := range []struct {
		name string
		conn *gozk.Conn
		path string
		opts []zksource.Option
	}{
		{"nil conn", nil, "/a", nil},
		{"empty path", conn, "", nil},
		{"relative path", conn, "a/b", nil},
		{"root", conn, "/", nil},
		{"trailing slash", conn, "/a/", nil},
		{"double slash", conn, "/a//b", nil},
		{"dot segment", conn, "/a/../b", nil},
		{"nil option", conn, "/a", []zksource.Option{nil}},
		{"nil logger", conn, "/a", []zksource.Option{zksource.WithLogger(nil)}},
		{"empty acl", conn, "/a", []zksource.Option{zksource.WithACL(nil)}},
	} {
		if _, err := zksource.New(tc.conn, tc.path, tc.opts...); !errors.Is(err, locker.ErrInvalidArgument) {
			t.Errorf("%s: New(%q) = %v; want ErrInvalidArgument", tc.name, tc.path, err)
		}
	}
}

func TestAppliesOnStartAndChange(t *testing.T) {
	conn := connect(t, zkAddr)
	path := "/test/" + t.Name() + "/active"
	src := newSource(t, conn, path)
	set(t, src, "redis") // creates /test and /test/<name>
	r := sourcetest.Watch(t, src)
	if got := r.WaitFor(t, "redis", 5*time.Second); got.Epoch != 1 {
		t.Errorf("first value: Epoch = %d; want 1 (version 0 + 1)", got.Epoch)
	}
	if _, err := conn.Set(path, []byte(" zk\n"), -1); err != nil {
		t.Fatal(err)
	}
	if got := r.WaitFor(t, "zk", time.Second); got.Epoch != 2 {
		t.Errorf("second value: Epoch = %d; want 2", got.Epoch)
	}
}

func TestWaitsForMissingNode(t *testing.T) {
	conn := connect(t, zkAddr)
	src := newSource(t, conn, "/test/"+t.Name())
	r := sourcetest.Watch(t, src)
	set(t, src, "etcd")
	if got := r.WaitFor(t, "etcd", time.Second); got.Epoch != 1 {
		t.Errorf("Epoch = %d; want 1", got.Epoch)
	}
}

func TestDeleteAndEmptyAreIgnored(t *testing.T) {
	conn := connect(t, zkAddr)
	path := "/test/" + t.Name()
	src := newSource(t, conn, path)
	set(t, src, "redis")
	r := sourcetest.Watch(t, src)
	r.WaitFor(t, "redis", 5*time.Second)
	if err := conn.Delete(path, -1); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Create(path, []byte(" "), 0, gozk.WorldACL(gozk.PermAll)); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Set(path, []byte("zk"), -1); err != nil {
		t.Fatal(err)
	}
	r.WaitFor(t, "zk", time.Second)
	if got := r.Applied(); len(got) != 2 {
		t.Errorf("applied %+v; want exactly redis then zk", got)
	}
}

func TestThreeSourcesFollowOneSet(t *testing.T) {
	path := "/test/" + t.Name()
	var recs []*sourcetest.Recorder
	var srcs []*zksource.Source
	for range 3 {
		src := newSource(t, connect(t, zkAddr), path)
		srcs = append(srcs, src)
		recs = append(recs, sourcetest.Watch(t, src))
	}
	set(t, srcs[0], "secondary")
	var epochs []uint64
	for _, r := range recs {
		epochs = append(epochs, r.WaitFor(t, "secondary", time.Second).Epoch)
	}
	// Set does not validate: an unknown name reaches every watcher, and the
	// switcher is the one that ignores it.
	set(t, srcs[1], "no-such-engine")
	for i, r := range recs {
		r.WaitFor(t, "no-such-engine", time.Second)
		if epochs[i] != epochs[0] {
			t.Errorf("source %d reached epoch %d; source 0 reached %d", i, epochs[i], epochs[0])
		}
	}
}

func TestSetEmpty(t *testing.T) {
	src := newSource(t, connect(t, zkAddr), "/test/"+t.Name())
	if err := src.Set(context.Background(), "\t"); !errors.Is(err, locker.ErrInvalidArgument) {
		t.Errorf("Set(\"\\t\") = %v; want ErrInvalidArgument", err)
	}
}

func TestSetUnreachable(t *testing.T) {
	srv := testserver.ZooKeeper(t)
	conn := connect(t, srv.Addr())
	src := newSource(t, conn, "/k")
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := src.Set(ctx, "x"); !errors.Is(err, locker.ErrUnavailable) {
		t.Errorf("Set() = %v; want ErrUnavailable", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Set took %v; want about the context's 300ms", d)
	}
}

// TestSurvivesRestart: a value written after the server came back reaches
// the source, and cancelling a Watch stuck on a dead server returns.
func TestSurvivesRestart(t *testing.T) {
	srv := testserver.ZooKeeper(t)
	conn := connect(t, srv.Addr())
	src := newSource(t, conn, "/restart")
	set(t, src, "a")
	r := sourcetest.Watch(t, src)
	r.WaitFor(t, "a", 5*time.Second)
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	other := newSource(t, connect(t, srv.Addr()), "/restart")
	set(t, other, "b")
	r.WaitFor(t, "b", 10*time.Second)
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	r.Stop(t) // on a dead server: must still return promptly
}

func TestPropose(t *testing.T) {
	path := fmt.Sprintf("/test/propose/%d/active", time.Now().UnixNano()) // missing, whatever -count
	sourcetest.Propose(t, newSource(t, connect(t, zkAddr), path), newSource(t, connect(t, zkAddr), path))
}

func TestRoster(t *testing.T) {
	conn := connect(t, zkAddr)
	src := newSource(t, conn, "/test/roster/active")
	set(t, src, "redis")
	sourcetest.Roster(t, src)
	// The last member out leaves the watched node as it found it.
	if _, st, err := conn.Get(src.Path()); err != nil || st.NumChildren != 0 {
		t.Errorf("watched node after the last Retract: err %v, stat %+v; want no children", err, st)
	}
}

// An announcement its caller gave up on still ends before a retraction
// begins: a switcher closed mid-announcement leaves no members node.
func TestRetractAfterAbandonedAnnounce(t *testing.T) {
	conn := connect(t, zkAddr)
	src := newSource(t, conn, "/test/abandoned/active")
	set(t, src, "redis")
	for i := range 20 {
		id := fmt.Sprintf("abandoned-%d", i)
		gone, cancel := context.WithCancel(context.Background())
		cancel()
		_ = src.Announce(gone, switcher.Member{ID: id, Engine: "redis"})
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := src.Retract(ctx, id)
		cancel()
		if err != nil {
			t.Fatalf("Retract(%q) = %v", id, err)
		}
		if _, st, err := conn.Get(src.Path()); err != nil || st.NumChildren != 0 {
			t.Fatalf("watched node after an abandoned Announce and its Retract (round %d): err %v, stat %+v; want no children", i, err, st)
		}
	}
}
