// Package freeport picks free loopback TCP ports, for servers that must be
// told their port before they start (test servers, lockctl's embedded
// etcd pair).
package freeport

import (
	"fmt"
	"net"
)

// Loopback returns n distinct ports that were free on 127.0.0.1. They are
// held open together while picked, so the n are distinct; another process
// may still take one before the caller binds it, so callers retry a start
// that finds its port taken.
func Loopback(n int) ([]int, error) {
	ports := make([]int, 0, n)
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	for len(ports) < n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("freeport: picking a free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
