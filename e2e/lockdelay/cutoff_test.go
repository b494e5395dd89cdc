package lockdelay_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/internal/fleettest"
	"github.com/orthrus-go/orthrus/internal/netfault"
	"github.com/orthrus-go/orthrus/locker"
)

// TestCutOffHolder cuts a live holder off its server (its bytes dropped):
// it loses the hold at its TTL, as without a delay, while the name stays
// barred for the delay after that, so the holder has the delay to stop
// before the next grant. The holder renews a TTL of lease every third of
// it; its last renewal came less than a third of the TTL before the cut.
func TestCutOffHolder(t *testing.T) {
	for kind, upstream := range map[string]string{"redis": servers.Redis, "etcd": servers.Etcd} {
		t.Run(kind, func(t *testing.T) {
			link := netfault.New(t, upstream)
			via := fleettest.Servers{Redis: link.Addr(), Etcd: link.Addr()}
			name := t.Name() + "/" + strconv.FormatInt(time.Now().UnixNano(), 36)
			holder := newLocker(t, via.Processes(t)[kind](t), name, locker.WithTTL(lease), locker.WithLockDelay(delay))
			waiter := newLocker(t, servers.Processes(t)[kind](t), name, locker.WithLockDelay(delay))
			if err := holder.Lock(); err != nil {
				t.Fatal(err)
			}
			if err := link.Blackhole(); err != nil {
				t.Fatal(err)
			}
			cut := time.Now()
			// Healed before the link stops, so that its goroutines end.
			t.Cleanup(func() { _ = link.Heal() })

			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			granted := make(chan time.Time, 1)
			go func() { // ends with the grant or ctx
				if waiter.LockCtx(ctx) == nil {
					granted <- time.Now()
					_ = waiter.Unlock()
				}
				close(granted)
			}()
			var lost time.Time
			select {
			case <-holder.Lost():
				lost = time.Now()
			case <-ctx.Done():
				t.Fatal("holder's Lost still open after 30s")
			}
			got, ok := <-granted
			if !ok {
				t.Fatal("waiter not granted within 30s")
			}
			t.Logf("TTL %v, delay %v: holder lost %v after the cut, waiter granted %v after that (%v after the cut)",
				lease, delay, lost.Sub(cut), got.Sub(lost), got.Sub(cut))
			if d := lost.Sub(cut); d > lease+grantSlack {
				t.Errorf("holder lost the hold %v after the cut; want at its TTL (%v), within %v", d, lease, grantSlack)
			}
			// The server's life of the hold began after the holder's latest
			// renewal was sent, from which the holder counts its TTL.
			if d := got.Sub(lost); d < delay-100*time.Millisecond {
				t.Errorf("waiter granted %v after the holder's Lost; want the delay (%v) after it", d, delay)
			}
			if d := got.Sub(cut); d > lease+delay+grantSlack {
				t.Errorf("waiter granted %v after the cut; want within TTL + delay + %v = %v", d, grantSlack, lease+delay+grantSlack)
			}
		})
	}
}
