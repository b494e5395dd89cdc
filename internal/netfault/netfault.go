// Package netfault puts a TCP proxy between one client and one server, so
// that a test cuts that client alone off — its bytes dropped, its
// connections refused, its link slowed — while every other client reaches
// the server as before. It runs toxiproxy in the test's own process:
// nothing leaves loopback, and nothing needs root.
package netfault

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// Link is one client's path to a server.
type Link struct {
	mu    sync.Mutex
	proxy *toxiproxy.Proxy
	addr  string
}

// New starts a link to upstream on a free loopback port; it stops when the
// test ends.
func New(tb testing.TB, upstream string) *Link {
	tb.Helper()
	server := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	p := toxiproxy.NewProxy(server, tb.Name(), "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		tb.Fatalf("netfault: start a proxy to %s: %v", upstream, err)
	}
	l := &Link{proxy: p, addr: p.Listen}
	tb.Cleanup(func() {
		p.Toxics.ResetToxics(context.Background())
		p.Stop()
	})
	return l
}

// Addr is the address the client dials instead of the server's.
func (l *Link) Addr() string { return l.addr }

// Blackhole keeps the client's connections open and drops every byte both
// ways, as a broken route or a stateful firewall does: requests time out.
func (l *Link) Blackhole() error {
	return l.add(`{"name":"blackhole-%s","type":"timeout","stream":"%s","attributes":{"timeout":0}}`)
}

// Latency delays every byte both ways by d.
func (l *Link) Latency(d time.Duration) error {
	return l.add(`{"name":"latency-%s","type":"latency","stream":"%s","attributes":{"latency":` + fmt.Sprint(d.Milliseconds()) + `}}`)
}

// add adds the toxic of format to both streams; the format has the stream
// name twice.
func (l *Link) add(format string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, stream := range []string{"upstream", "downstream"} {
		if _, err := l.proxy.Toxics.AddToxicJson(strings.NewReader(fmt.Sprintf(format, stream, stream))); err != nil {
			return fmt.Errorf("netfault: %w", err)
		}
	}
	return nil
}

// Refuse closes the client's connections and refuses new ones, as a server
// that is down for this client alone.
func (l *Link) Refuse() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.proxy.Stop()
}

// Heal ends every fault: the client reaches the server again.
func (l *Link) Heal() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.proxy.Toxics.ResetToxics(context.Background())
	if l.proxy.Enabled {
		return nil
	}
	if err := l.proxy.Start(); err != nil { // on the same address: the client dials it again
		return fmt.Errorf("netfault: heal: %w", err)
	}
	return nil
}
