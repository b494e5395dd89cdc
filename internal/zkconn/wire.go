package zkconn

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// wire tracks the connection's sockets: when the ensemble last sent anything,
// the session timeout it granted, the open sockets, so that Close can cut
// a handshake with a server that does not answer, and which creates are on
// the wire.
type wire struct {
	base      time.Time
	handshake time.Duration // how long a new socket may stay silent
	lastRead  atomic.Int64  // since base, of the last byte received
	// asked is since base, +1, of the first write after the last byte
	// received: a request waits for its answer since then; 0 when none.
	asked   atomic.Int64
	timeout atomic.Int64 // the session timeout granted, from the connect response
	// refusals counts the connections refused, or closed or reset by the
	// server, since the last connection that was accepted.
	refusals atomic.Int32

	tls     *tls.Config           // nil for plain TCP
	failure atomic.Pointer[error] // why the last socket failed before the server answered

	mu     sync.Mutex
	conns  map[*wireConn]struct{}
	closed bool

	// The guids of creates in flight, and what to call once the create
	// carrying it has been written to a socket.
	gmu    sync.Mutex
	guids  map[string]func()
	nguids atomic.Int32
}

// maxConnectResponse bounds the length of the first packet a server sends,
// its connect response (36 bytes, 37 with the read-only flag): go-zookeeper
// allocates whatever length the first four bytes claim, some 760 MB for a
// Redis server's "-ERR" reply, and reads on until the server hangs up.
const maxConnectResponse = 256

// newWire returns a wire whose new sockets are closed when the server has
// not answered the handshake within handshake. go-zookeeper itself waits ten
// receive timeouts (more than six session timeouts) for the answer: a server
// that accepts connections but does not serve them, frozen or starting up
// (ZooKeeper 3.8 can leave such a socket open), would keep the client from
// trying again until its session is long gone.
func newWire(handshake time.Duration, conf *tls.Config) *wire {
	return &wire{
		base:      time.Now(),
		handshake: handshake,
		tls:       conf,
		conns:     make(map[*wireConn]struct{}),
		guids:     make(map[string]func()),
	}
}

// expect has sent called once a request naming a protected node of guid
// has been written, unless forget(guid) came first.
func (w *wire) expect(guid string, sent func()) {
	w.gmu.Lock()
	w.guids[guid] = sent
	w.nguids.Add(1)
	w.gmu.Unlock()
}

// forget forgets guid: once it returns, its sent has run or never will.
func (w *wire) forget(guid string) {
	w.gmu.Lock()
	defer w.gmu.Unlock()
	if _, ok := w.guids[guid]; ok {
		delete(w.guids, guid)
		w.nguids.Add(-1)
	}
}

var nodeMark = []byte("/" + ProtectedPrefix)

// written signals the guids named in a request just written: node names
// "_c_<guid>...". A false match, a path that looks like a protected node's,
// only signals early. It runs on go-zookeeper's send loop.
func (w *wire) written(b []byte) {
	w.gmu.Lock()
	defer w.gmu.Unlock()
	for len(b) > 0 {
		i := bytes.Index(b, nodeMark)
		if i < 0 {
			return
		}
		b = b[i+len(nodeMark):]
		if len(b) < GUIDLen {
			return
		}
		if sent, ok := w.guids[string(b[:GUIDLen])]; ok {
			sent()
			delete(w.guids, string(b[:GUIDLen]))
			w.nguids.Add(-1)
		}
	}
}

// explain adds to err why the last socket failed before the server
// answered, if one did: a refused TLS certificate, a server that is not
// ZooKeeper.
func (w *wire) explain(err error) error {
	if why := w.failure.Load(); why != nil {
		return fmt.Errorf("%w: %w", err, *why)
	}
	return err
}

// silence is how long the ensemble has sent nothing.
func (w *wire) silence() time.Duration {
	return time.Since(w.base) - time.Duration(w.lastRead.Load())
}

// dial is go-zookeeper's Dialer.
func (w *wire) dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	w.mu.Lock()
	closed := w.closed
	w.mu.Unlock()
	if closed {
		return nil, net.ErrClosed
	}
	c, err := net.DialTimeout(network, addr, timeout)
	if err == nil && w.tls != nil {
		c, err = handshake(c, addr, w.tls, timeout)
	}
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) {
			w.refusals.Add(1)
		}
		w.failure.Store(&err)
		return nil, err
	}
	w.refusals.Store(0)
	wc := &wireConn{Conn: c, w: w, in: bufio.NewReaderSize(c, readBuffer)}
	wc.silent = time.AfterFunc(w.handshake, func() { c.Close() })
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		wc.silent.Stop()
		c.Close()
		return nil, net.ErrClosed
	}
	w.conns[wc] = struct{}{}
	return wc, nil
}

// waiting is how long the oldest request written since the ensemble last
// sent anything has waited; 0 when none waits.
func (w *wire) waiting() time.Duration {
	at := w.asked.Load()
	if at == 0 {
		return 0
	}
	return time.Since(w.base) - time.Duration(at-1)
}

// cut closes the open sockets, as a server that died would: go-zookeeper
// reconnects to the next server, and the requests in flight fail with a
// dropped connection, which callers retry.
func (w *wire) cut() {
	w.mu.Lock()
	conns := make([]*wireConn, 0, len(w.conns))
	for c := range w.conns {
		conns = append(conns, c)
	}
	w.mu.Unlock()
	w.asked.Store(0)
	for _, c := range conns {
		_ = c.Conn.Close()
	}
}

func (w *wire) close() {
	w.mu.Lock()
	w.closed = true
	conns := w.conns
	w.conns = nil
	w.mu.Unlock()
	for c := range conns {
		c.Conn.Close()
	}
}

// readBuffer is the size of a socket's read buffer: go-zookeeper reads a
// reply's length, then the reply, each with a read of its own; buffered,
// one system call reads both, and the replies that came with them.
const readBuffer = 4096

// wireConn is one socket to a server.
type wireConn struct {
	net.Conn
	in     *bufio.Reader // over Conn: go-zookeeper reads through it
	w      *wire
	silent *time.Timer // closes the socket if the handshake gets no answer
	// The start of the first packet the server sends, the connect
	// response: length, protocol version, session timeout (milliseconds).
	// Reads are sequential, by go-zookeeper's handshake then receive loop.
	hdr   [12]byte
	nhdr  int
	ended bool // the server ended the connection
}

func (c *wireConn) Read(b []byte) (int, error) {
	n, err := c.in.Read(b)
	if err != nil && c.nhdr == 0 {
		// A copy: storing &err would put err on the heap on every read.
		why := err
		c.w.failure.Store(&why) // e.g. the server refused our client certificate
	}
	if err != nil && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)) && !c.ended {
		c.ended = true // the server closed it, or died
		c.w.refusals.Add(1)
	}
	if n > 0 {
		c.w.lastRead.Store(int64(time.Since(c.w.base)))
		c.w.asked.Store(0)
		if c.nhdr == 0 {
			c.silent.Stop()
		}
		if c.nhdr < len(c.hdr) {
			before := c.nhdr
			c.nhdr += copy(c.hdr[c.nhdr:], b[:n])
			if before < 4 && c.nhdr >= 4 {
				if err := c.checkLength(); err != nil {
					return 0, err
				}
			}
			if c.nhdr == len(c.hdr) {
				if ms := int32(binary.BigEndian.Uint32(c.hdr[8:12])); ms > 0 {
					c.w.timeout.Store(int64(time.Duration(ms) * time.Millisecond))
				}
			}
		}
	}
	return n, err
}

// checkLength refuses a server whose first packet cannot be a connect
// response: it is not ZooKeeper (a wrong port), and no session will come
// from it, as from a server that refuses the connection.
func (c *wireConn) checkLength() error {
	if n := binary.BigEndian.Uint32(c.hdr[:4]); n > 0 && n <= maxConnectResponse {
		return nil
	}
	err := fmt.Errorf("%s answered %q: not a ZooKeeper server", c.RemoteAddr(), c.hdr[:4])
	c.w.failure.Store(&err)
	if !c.ended {
		c.ended = true
		c.w.refusals.Add(1)
	}
	_ = c.Conn.Close()
	return err
}

// Write is called by go-zookeeper's handshake, then its send loop, with
// one whole request each time.
func (c *wireConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	if err == nil {
		c.w.asked.CompareAndSwap(0, int64(time.Since(c.w.base))+1)
	}
	if err == nil && c.w.nguids.Load() > 0 {
		c.w.written(b)
	}
	return n, err
}

func (c *wireConn) Close() error {
	c.silent.Stop()
	c.w.mu.Lock()
	delete(c.w.conns, c)
	c.w.mu.Unlock()
	return c.Conn.Close()
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
