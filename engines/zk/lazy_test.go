package zk_test

import (
	"context"
	"errors"
	"testing"
	"time"

	gozk "github.com/go-zookeeper/zk"

	"github.com/orthrus-go/orthrus/engines/zk"
	"github.com/orthrus-go/orthrus/internal/testserver"
	"github.com/orthrus-go/orthrus/locker"
)

// TestLazyConnect: with WithLazyConnect, New returns at once while the
// ensemble is down; calls fail with ErrUnavailable until it is back; then
// the session comes, authenticated before any node is created, and locks
// work.
func TestLazyConnect(t *testing.T) {
	srv := testserver.ZooKeeper(t)
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	e, err := zk.New([]string{srv.Addr()}, zk.WithLazyConnect(), zk.WithPrefix("/lazy"),
		zk.WithAuth("digest", "lazy:secret"), zk.WithSessionTimeout(4*time.Second))
	if err != nil {
		t.Fatalf("New() with the ensemble down = %v; want an engine", err)
	}
	defer e.Close()
	if took := time.Since(start); took > time.Second {
		t.Errorf("New() took %v; want it not to wait for a session", took)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	err = e.Ping(ctx)
	cancel()
	if !errors.Is(err, locker.ErrUnavailable) {
		t.Errorf("Ping() with the ensemble down = %v; want ErrUnavailable", err)
	}

	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := e.Ping(ctx)
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Ping() = %v 15s after the ensemble is back; want nil", err)
		}
		time.Sleep(50 * time.Millisecond) // polling with a deadline
	}
	l, err := e.NewLocker("job")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := l.LockCtx(ctx); err != nil {
		t.Fatalf("LockCtx() = %v", err)
	}
	defer l.Unlock()

	// The namespace carries the credentials' ACL: the session was
	// authenticated before the engine created anything.
	c, _, err := gozk.Connect([]string{srv.Addr()}, 4*time.Second, gozk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, _, err := c.GetACL("/lazy"); !errors.Is(err, gozk.ErrNoAuth) {
		t.Errorf("GetACL(/lazy) without credentials = %v; want ErrNoAuth", err)
	}
	if err := c.AddAuth("digest", []byte("lazy:secret")); err != nil {
		t.Fatal(err)
	}
	acl, _, err := c.GetACL("/lazy")
	if err != nil {
		t.Fatalf("GetACL(/lazy) = %v", err)
	}
	if len(acl) != 1 || acl[0].Scheme != "digest" {
		t.Errorf("ACL of /lazy = %+v; want the digest credentials' only", acl)
	}
}
