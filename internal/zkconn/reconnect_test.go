package zkconn_test

import (
	"fmt"
	"testing"
	"time"

	gozk "github.com/go-zookeeper/zk"
	"golang.org/x/sync/errgroup"

	"github.com/orthrus-go/orthrus/internal/netfault"
)

// A connection that comes back with watches set sends them again while its
// new receive loop records the zxid of each reply. go-zookeeper v1.0.4 reads
// and writes that zxid without synchronisation (go-zookeeper/zk#35): under
// -race this test fails without the fix in third_party/go-zookeeper.
func TestReconnectWithWatches(t *testing.T) {
	link := netfault.New(t, zkAddr)
	conn, events, err := gozk.Connect([]string{link.Addr()}, 4*time.Second, gozk.WithLogInfo(false), gozk.WithLogger(quietZK{}))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	await := func(want gozk.State) {
		t.Helper()
		timeout := time.After(10 * time.Second)
		for {
			select {
			case ev := <-events:
				if ev.Type == gozk.EventSession && ev.State == want {
					return
				}
			case <-timeout:
				t.Fatalf("no %v within 10s", want)
			}
		}
	}
	await(gozk.StateHasSession)
	// Enough watches that sending them again takes a while, and requests
	// queued while the link is down: their replies, each with a zxid,
	// arrive while the watches are being sent again.
	var g errgroup.Group
	g.SetLimit(16)
	for i := range watches {
		g.Go(func() error {
			_, _, _, err := conn.ExistsW(fmt.Sprintf("/reconnect-with-watches/%d", i))
			return err
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	link.Refuse()
	await(gozk.StateDisconnected)
	for range 16 {
		g.Go(func() error {
			_, _, err := conn.Exists("/")
			return err
		})
	}
	if err := link.Heal(); err != nil {
		t.Fatal(err)
	}
	await(gozk.StateHasSession)
	if err := g.Wait(); err != nil {
		t.Fatalf("Exists(/) across the reconnect = %v", err)
	}
}

const watches = 10000

type quietZK struct{}

func (quietZK) Printf(string, ...any) {}
