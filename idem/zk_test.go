package idem_test

import (
	"context"
	"errors"
	"testing"
	"time"

	gozk "github.com/go-zookeeper/zk"

	"github.com/orthrus-go/orthrus/idem"
	"github.com/orthrus-go/orthrus/idem/internal/idemtest"
	"github.com/orthrus-go/orthrus/locker"
)

// Records are TTL nodes, which the server deletes once they have expired
// (TestMain has it check every 100ms), or persistent nodes with
// WithoutTTLNodes, which stay; the gate works the same over both.
func TestZKNodes(t *testing.T) {
	conn, err := idemtest.ZKConn(zkAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	const expiry, retention = 300 * time.Millisecond, 500 * time.Millisecond
	ctx := context.Background()
	var paths []string
	for _, opts := range [][]idem.StoreOption{nil, {idem.WithoutTTLNodes()}} {
		s, err := idem.NewZKStore(conn, nil, append(opts, idem.WithPrefix("/idemtest/nodes"))...)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		g := newGate(t, s, idem.WithExpiry(expiry), idem.WithRetention(retention))
		content := len(paths)
		tk := mustRun(t, g, content)
		mustDup(t, g, content, idem.Running)
		if err := tk.Done(ctx, nil); err != nil {
			t.Fatal(err)
		}
		mustDup(t, g, content, idem.Succeeded)
		paths = append(paths, s.Path(tk.ID()))
	}
	idemtest.Eventually(t, 10*time.Second, "the server deletes the expired TTL node", func() (bool, error) {
		ok, _, err := conn.Exists(paths[0])
		return !ok, err
	})
	if ok, _, err := conn.Exists(paths[1]); !ok || err != nil {
		t.Errorf("persistent node: exists %v, %v; want it kept", ok, err)
	}
}

// A refusal of the server is an answer, not an outage: the gate must not
// fail open on it. After Close the store refuses every call.
func TestZKErrors(t *testing.T) {
	owner, err := idemtest.ZKConn(zkAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close()
	if err := owner.AddAuth("digest", []byte("owner:pw")); err != nil {
		t.Fatal(err)
	}
	const prefix = "/idemtest/zkerrors"
	if _, err := owner.Create(prefix, nil, 0, gozk.AuthACL(gozk.PermAll)); err != nil && !errors.Is(err, gozk.ErrNodeExists) {
		t.Fatal(err)
	}
	other, err := idemtest.ZKConn(zkAddr) // no credentials
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	s, err := idem.NewZKStore(other, nil, idem.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, _, err = s.Create(ctx, "k", []byte("v"), time.Second, time.Second)
	if !errors.Is(err, gozk.ErrNoAuth) || errors.Is(err, locker.ErrUnavailable) {
		t.Errorf("Create() under another's ACL = %v; want ErrNoAuth, not ErrUnavailable", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("Close() = %v", err)
	}
	if _, _, err := s.Get(ctx, "k"); !errors.Is(err, locker.ErrClosed) {
		t.Errorf("Get() after Close = %v; want ErrClosed", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close() = %v", err)
	}
	if _, err := idem.NewZKStore(other, nil, idem.WithPrefix("/zookeeper/idem")); !errors.Is(err, locker.ErrInvalidArgument) {
		t.Errorf("NewZKStore(prefix /zookeeper/idem) = %v; want ErrInvalidArgument", err)
	}
}
