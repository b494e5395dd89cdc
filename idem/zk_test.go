package idem_test

import (
	"context"
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/idem"
)

// Records are TTL nodes, which the server deletes once they have expired
// (TestMain has it check every 100ms), or persistent nodes with
// WithoutTTLNodes, which stay; the gate works the same over both.
func TestZKNodes(t *testing.T) {
	conn, err := zkConn(zkAddr)
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
	eventually(t, 10*time.Second, "the server deletes the expired TTL node", func() (bool, error) {
		ok, _, err := conn.Exists(paths[0])
		return !ok, err
	})
	if ok, _, err := conn.Exists(paths[1]); !ok || err != nil {
		t.Errorf("persistent node: exists %v, %v; want it kept", ok, err)
	}
}
