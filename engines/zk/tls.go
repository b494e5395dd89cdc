package zk

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"time"

	"github.com/orthrus-go/orthrus/locker"
)

// WithTLS connects to the servers' secure client port (secureClientPort,
// served by ZooKeeper's Netty connection factory) over TLS with conf: its
// RootCAs to verify the servers, its Certificates for mutual TLS. When
// conf.ServerName is empty, each server's host is verified. A server whose
// handshake fails is skipped like an unreachable one, and New's error says
// why. Default: no TLS.
func WithTLS(conf *tls.Config) Option {
	return func(s *settings) error {
		if conf == nil {
			return fmt.Errorf("zk: WithTLS: %w: config is nil", locker.ErrInvalidArgument)
		}
		s.tls = conf.Clone()
		return nil
	}
}

// handshake runs the TLS handshake on a new socket within timeout, so that
// a server that does not speak TLS cannot hold the dial.
func handshake(c net.Conn, addr string, conf *tls.Config, timeout time.Duration) (net.Conn, error) {
	if conf.ServerName == "" {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			host = addr
		}
		conf = conf.Clone()
		conf.ServerName = host
	}
	tc := tls.Client(c, conf)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := tc.HandshakeContext(ctx); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("tls handshake with %s: %w", addr, err)
	}
	return tc, nil
}
