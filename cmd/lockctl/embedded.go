package main

import (
	"fmt"
	"net/url"
	"os"
	"time"

	"go.etcd.io/etcd/server/v3/embed"

	"github.com/orthrus-go/orthrus/internal/freeport"
)

// embeddedEtcd is one in-process etcd server in a temporary directory, on
// loopback ports chosen by the OS: the drill's default engines, so that it
// runs on a machine with nothing installed.
type embeddedEtcd struct {
	name   string
	dir    string
	server *embed.Etcd
	client string // client URL
}

func startEmbedded(name string) (*embeddedEtcd, error) {
	dir, err := os.MkdirTemp("", "lockctl-"+name+"-*")
	if err != nil {
		return nil, err
	}
	ports, err := freeport.Loopback(2)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	clientURL := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", ports[0])}
	peerURL := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", ports[1])}
	cfg := embed.NewConfig()
	cfg.Name = name
	cfg.Dir = dir
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{clientURL}, []url.URL{clientURL}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peerURL}, []url.URL{peerURL}
	cfg.InitialCluster = name + "=" + peerURL.String()
	cfg.LogLevel = "error"
	cfg.LogOutputs = []string{dir + "/etcd.log"}
	srv, err := embed.StartEtcd(cfg)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start embedded etcd %s: %w", name, err)
	}
	select {
	case <-srv.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		srv.Close()
		os.RemoveAll(dir)
		return nil, fmt.Errorf("embedded etcd %s not ready after 30s", name)
	}
	return &embeddedEtcd{name: name, dir: dir, server: srv, client: clientURL.String()}, nil
}

// stop shuts the server down: the drill's fault. Idempotent.
func (e *embeddedEtcd) stop() error {
	if e.server != nil {
		e.server.Close()
		e.server = nil
	}
	return nil
}

func (e *embeddedEtcd) close() {
	_ = e.stop()
	os.RemoveAll(e.dir)
}
