package etcdsource_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/orthrus-go/orthrus/internal/testmain"
	"github.com/orthrus-go/orthrus/internal/testserver"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/switcher/etcdsource"
	"github.com/orthrus-go/orthrus/switcher/sourcetest"
)

// endpoint is the etcd shared by the tests and examples; tests that break
// their server start one of their own.
var endpoint string

func TestMain(m *testing.M) {
	testmain.Run(m, func() (func(), error) {
		s, err := testserver.NewEtcd()
		if err != nil {
			return nil, err
		}
		endpoint = s.Addr()
		return func() { _ = s.Stop() }, nil
	})
}

// newClient returns a client that reconnects quickly after a restart.
func newClient(t testing.TB, endpoints ...string) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 2 * time.Second,
		Logger:      zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 500 * time.Millisecond},
			MinConnectTimeout: time.Second,
		})},
	})
	if err != nil {
		t.Fatalf("clientv3.New(%v) = %v", endpoints, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func newSource(t testing.TB, c *clientv3.Client, key string) *etcdsource.Source {
	t.Helper()
	src, err := etcdsource.New(c, key)
	if err != nil {
		t.Fatalf("New(%q) = %v", key, err)
	}
	return src
}

func put(t *testing.T, c *clientv3.Client, key, value string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.Put(ctx, key, value); err != nil {
		t.Fatalf("Put(%q, %q) = %v", key, value, err)
	}
}

func TestNewInvalid(t *testing.T) {
	c := newClient(t, endpoint)
	for _, tc := range []struct {
		name   string
		client *clientv3.Client
		key    string
		opts   []etcdsource.Option
	}{
		{"nil client", nil, "k", nil},
		{"empty key", c, "", nil},
		{"nil option", c, "k", []etcdsource.Option{nil}},
		{"nil logger", c, "k", []etcdsource.Option{etcdsource.WithLogger(nil)}},
	} {
		if _, err := etcdsource.New(tc.client, tc.key, tc.opts...); !errors.Is(err, locker.ErrInvalidArgument) {
			t.Errorf("%s: New() = %v; want ErrInvalidArgument", tc.name, err)
		}
	}
}

func TestAppliesOnStartAndChange(t *testing.T) {
	c := newClient(t, endpoint)
	key := "/test/" + t.Name()
	put(t, c, key, "redis")
	r := sourcetest.Watch(t, newSource(t, c, key))
	got := r.WaitFor(t, "redis", 5*time.Second)
	if got.Epoch != 1 {
		t.Errorf("first value: Epoch = %d; want 1 (the key's version)", got.Epoch)
	}
	put(t, c, key, " zk\n")
	got = r.WaitFor(t, "zk", time.Second)
	if got.Epoch != 2 {
		t.Errorf("second value: Epoch = %d; want 2", got.Epoch)
	}
}

func TestWaitsForMissingKey(t *testing.T) {
	c := newClient(t, endpoint)
	key := "/test/" + t.Name()
	src := newSource(t, c, key)
	r := sourcetest.Watch(t, src)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := src.Set(ctx, "etcd"); err != nil {
		t.Fatalf("Set() = %v", err)
	}
	if got := r.WaitFor(t, "etcd", time.Second); got.Epoch != 1 {
		t.Errorf("Epoch = %d; want 1", got.Epoch)
	}
}

func TestDeleteAndEmptyAreIgnored(t *testing.T) {
	c := newClient(t, endpoint)
	key := "/test/" + t.Name()
	put(t, c, key, "redis")
	r := sourcetest.Watch(t, newSource(t, c, key))
	r.WaitFor(t, "redis", 5*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	put(t, c, key, "  ")
	put(t, c, key, "zk")
	r.WaitFor(t, "zk", time.Second)
	if got := r.Applied(); len(got) != 2 {
		t.Errorf("applied %+v; want exactly redis then zk", got)
	}
}

func TestThreeSourcesFollowOneSet(t *testing.T) {
	key := "/test/" + t.Name()
	var recs []*sourcetest.Recorder
	var srcs []*etcdsource.Source
	for range 3 {
		src := newSource(t, newClient(t, endpoint), key)
		srcs = append(srcs, src)
		recs = append(recs, sourcetest.Watch(t, src))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srcs[0].Set(ctx, "secondary"); err != nil {
		t.Fatalf("Set() = %v", err)
	}
	var epochs []uint64
	for _, r := range recs {
		epochs = append(epochs, r.WaitFor(t, "secondary", time.Second).Epoch)
	}
	// Set does not validate: an unknown name reaches every watcher, and the
	// switcher is the one that ignores it.
	if err := srcs[1].Set(ctx, "no-such-engine"); err != nil {
		t.Fatalf("Set(unknown) = %v; want nil", err)
	}
	for i, r := range recs {
		r.WaitFor(t, "no-such-engine", time.Second)
		if epochs[i] != epochs[0] {
			t.Errorf("source %d reached epoch %d; source 0 reached %d", i, epochs[i], epochs[0])
		}
	}
}

func TestSetEmpty(t *testing.T) {
	src := newSource(t, newClient(t, endpoint), "/test/"+t.Name())
	if err := src.Set(context.Background(), " "); !errors.Is(err, locker.ErrInvalidArgument) {
		t.Errorf("Set(\" \") = %v; want ErrInvalidArgument", err)
	}
}

func TestSetUnreachable(t *testing.T) {
	src := newSource(t, newClient(t, "127.0.0.1:1"), "/k")
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

// TestSurvivesRestart: a value written while the watch was broken, and one
// written after, both reach the source.
func TestSurvivesRestart(t *testing.T) {
	srv := testserver.Etcd(t)
	c := newClient(t, srv.Addr())
	key := "/test/restart"
	put(t, c, key, "a")
	r := sourcetest.Watch(t, newSource(t, c, key))
	r.WaitFor(t, "a", 5*time.Second)
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	put(t, c, key, "b")
	r.WaitFor(t, "b", 10*time.Second)
}

// TestRecoversFromCompaction: a watch that starts from a compacted revision
// reads the key again and applies its latest value.
func TestRecoversFromCompaction(t *testing.T) {
	c := newClient(t, endpoint)
	key := "/test/" + t.Name()
	put(t, c, key, "a")
	src := newSource(t, c, key)
	var once sync.Once
	etcdsource.SetBeforeWatch(src, func() {
		once.Do(func() {
			// The watch will start after the revision it read: write past
			// it and compact it away.
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			resp, err := c.Put(ctx, key, "b")
			if err != nil {
				t.Errorf("Put() = %v", err)
				return
			}
			if _, err := c.Put(ctx, "/test/other", "x"); err != nil {
				t.Errorf("Put() = %v", err)
				return
			}
			if _, err := c.Compact(ctx, resp.Header.Revision+1); err != nil {
				t.Errorf("Compact() = %v", err)
			}
		})
	})
	r := sourcetest.Watch(t, src)
	r.WaitFor(t, "b", 5*time.Second)
}

func TestPropose(t *testing.T) {
	key := fmt.Sprintf("/test/propose/%d", time.Now().UnixNano()) // missing, whatever -count
	sourcetest.Propose(t, newSource(t, newClient(t, endpoint), key), newSource(t, newClient(t, endpoint), key))
}

func TestRoster(t *testing.T) {
	sourcetest.Roster(t, newSource(t, newClient(t, endpoint), "/test/roster"))
}
