package zk

import (
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	gozk "github.com/go-zookeeper/zk"

	"github.com/orthrus-go/orthrus/locker"
)

// An epoch is one stretch of one session during which the engine trusts
// its nodes. It ends (lost closes) when the session expires, or when the
// engine has not heard from the ensemble for the session timeout, after
// which the server may have expired the session without the engine knowing.
// A reconnection to the same session after that starts a new epoch: the
// nodes of the old one were given up.
type epoch struct {
	sid  int64
	lost chan struct{}
}

func (ep *epoch) isLost() bool { return isClosed(ep.lost) }

// node is one of the engine's lock nodes, waiting or holding.
type node struct {
	path     string
	parent   string
	name     string        // last path element
	ep       *epoch        // the epoch it was created in
	gone     chan struct{} // closed when the engine stops tracking it
	hold     *locker.Hold  // set when granted; guarded by Engine.mu
	watched  atomic.Bool   // a watch on the node reports its deletion
	armTimer *time.Timer   // sets the watch later; guarded by Engine.mu
}

// forgetLocked stops tracking n. Called with e.mu held.
func (e *Engine) forgetLocked(n *node) {
	delete(e.nodes, n.path)
	e.parentLeftLocked(n.parent)
	close(n.gone)
	if n.armTimer != nil {
		n.armTimer.Stop()
	}
}

// onEvent is go-zookeeper's event callback. It runs on go-zookeeper's
// goroutines and must not block; it never calls into go-zookeeper.
func (e *Engine) onEvent(ev gozk.Event) {
	switch ev.Type {
	case gozk.EventSession:
		if c := e.connPtr.Load(); c != nil {
			e.sync(c)
		}
	case gozk.EventNodeDeleted:
		e.nodeDeleted(ev.Path)
	}
}

// sync brings the engine's view of the session up to date with c's. It
// reads c's current state rather than trusting the order of events: a
// session ID other than the current epoch's means that session is over.
func (e *Engine) sync(c *gozk.Conn) {
	state, sid := c.State(), c.SessionID()
	e.mu.Lock()
	switch {
	case state == gozk.StateHasSession:
		if e.ep != nil && e.ep.sid != sid {
			e.loseLocked("session expired", false)
		}
		if e.ep == nil || e.ep.sid != sid || e.ep.isLost() {
			e.ep = &epoch{sid: sid, lost: make(chan struct{})}
		}
		e.setUpLocked(true)
	case state == gozk.StateExpired || (sid == 0 && e.ep != nil):
		e.loseLocked("session expired", false)
		e.setUpLocked(false)
	default:
		e.setUpLocked(false)
	}
	e.mu.Unlock()
	poke(e.changed)
}

func (e *Engine) setUpLocked(up bool) {
	switch {
	case up && !e.isUp:
		close(e.up)
		e.isUp = true
	case !up && e.isUp:
		e.up = make(chan struct{})
		e.isUp = false
	}
}

// upChan returns a channel that is closed while a session is connected.
func (e *Engine) upChan() <-chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.up
}

// loseLocked ends the current epoch: every node of it is given up, and
// every hold among them is lost. With reap, the nodes may still exist (the
// session may yet come back) and are deleted in the background.
func (e *Engine) loseLocked(why string, reap bool) {
	ep := e.ep
	if ep == nil || ep.isLost() {
		return
	}
	close(ep.lost)
	var lost []*locker.Hold
	for path, n := range e.nodes {
		if n.ep != ep {
			continue
		}
		e.forgetLocked(n)
		if n.hold != nil {
			n.hold.MarkLost()
			lost = append(lost, n.hold)
		}
		if reap {
			e.reap(reapTask{path: path})
		}
	}
	switch {
	case len(lost) == 1:
		h := lost[0]
		e.log.Warn("zk: hold lost", "name", h.Name, "owner", h.Owner, "token", h.Token, "why", why)
	case len(lost) > 1:
		// One line, not one per hold: 100k of them would drown the log.
		e.log.Warn("zk: holds lost", "count", len(lost), "first", lost[0].Name, "why", why)
	}
}

// nodeDeleted handles the deletion of a watched node: when it is one of
// ours and held, the hold is lost.
func (e *Engine) nodeDeleted(path string) {
	e.mu.Lock()
	n := e.nodes[path]
	e.mu.Unlock()
	if n != nil {
		e.lostNode(n, "node deleted")
	}
}

// lostNode stops tracking n, which is gone; its hold, if any, is lost.
func (e *Engine) lostNode(n *node, why string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.nodes[n.path] != n {
		return
	}
	e.forgetLocked(n)
	if n.hold != nil {
		n.hold.MarkLost()
		e.log.Warn("zk: hold lost", "name", n.hold.Name, "owner", n.hold.Owner, "token", n.hold.Token, "why", why)
	}
}

// track starts watching for the loss of a node the engine just created.
// It must be called before the watch on the node is set, so that no
// deletion event is missed.
func (e *Engine) track(path, parent string, version int32) *node {
	n := &node{path: path, parent: parent, name: path[len(parent)+1:], gone: make(chan struct{})}
	e.mu.Lock()
	defer e.mu.Unlock()
	n.ep = e.ep
	if n.ep == nil || n.ep.isLost() {
		close(n.gone)
		e.reap(reapTask{path: path})
		return n
	}
	e.nodes[path] = n
	e.parentUsedLocked(parent, version)
	return n
}

// untrack stops tracking n; it reports whether n was still tracked.
func (e *Engine) untrack(n *node) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.nodes[n.path] != n {
		return false
	}
	e.forgetLocked(n)
	return true
}

// grant makes n the node of hold h, with token czxid, unless n is no longer
// trustworthy: gone, or of an epoch that ended. A watch on n is set after
// arm, unless it has one.
func (e *Engine) grant(h *locker.Hold, n *node, czxid int64, arm time.Duration) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.nodes[n.path] != n || n.ep != e.ep || n.ep.isLost() {
		return false
	}
	n.hold = h
	h.Token = uint64(czxid)
	h.State = n
	if !n.watched.Load() {
		e.armLater(n, arm)
	}
	return true
}

// refused tells that the engine is certainly cut off from the ensemble:
// no session is connected and the last connection to each server was
// refused, or ended by the server (which a kill does), rather than timed
// out. A server that is only slow is not counted: its connection is
// accepted.
func (e *Engine) refused() bool {
	if e.wire.refusals.Load() < int32(e.nservers) {
		return false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return !e.isUp
}

// liveness is the session timeout the server granted, or the one asked for
// until it has answered.
func (e *Engine) liveness() time.Duration {
	if d := time.Duration(e.wire.timeout.Load()); d > 0 {
		return d
	}
	return e.sessionTimeout
}

// monitor ends the epoch when the engine has been disconnected and has not
// heard from the ensemble for the session timeout: past that, the server
// may have expired the session and granted its locks to others, so holds
// are reported lost even before a reconnection confirms it.
func (e *Engine) monitor() {
	defer e.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		e.mu.Lock()
		armed := !e.isUp && e.ep != nil && !e.ep.isLost()
		e.mu.Unlock()
		wait := time.Hour
		if armed {
			wait = max(e.liveness()-e.wire.silence(), 0)
		}
		timer.Reset(wait)
		select {
		case <-e.ctx.Done():
			return
		case <-e.changed:
		case <-timer.C:
			if armed {
				e.suspect()
			}
		}
	}
}

// suspect ends the epoch if the ensemble is still silent.
func (e *Engine) suspect() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.isUp && e.wire.silence() >= e.liveness() {
		e.loseLocked("no answer from ZooKeeper for the session timeout", true)
	}
}

func poke(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// wire tracks the engine's sockets: when the ensemble last sent anything,
// the session timeout it granted, the open sockets, so that Close can cut
// a handshake with a server that does not answer, and which creates are on
// the wire.
type wire struct {
	base      time.Time
	handshake time.Duration // how long a new socket may stay silent
	lastRead  atomic.Int64  // since base, of the last byte received
	timeout   atomic.Int64  // the session timeout granted, from the connect response
	// refusals counts the connections refused, or closed or reset by the
	// server, since the last connection that was accepted.
	refusals atomic.Int32

	tls     *tls.Config           // WithTLS; nil for plain TCP
	failure atomic.Pointer[error] // why the last socket failed before the server answered

	mu     sync.Mutex
	conns  map[*wireConn]struct{}
	closed bool

	// The guids of creates in flight, and a channel closed once the
	// create carrying it has been written to a socket.
	gmu    sync.Mutex
	guids  map[string]chan struct{}
	nguids atomic.Int32
}

// newWire returns a wire whose new sockets are closed when the server has
// not answered the handshake within handshake. go-zookeeper itself waits ten
// receive timeouts (more than six session timeouts) for the answer: a server
// that accepts connections but does not serve them, frozen or starting up
// (ZooKeeper 3.8 can leave such a socket open), would keep the client from
// trying again until its session is long gone.
func newWire(handshake time.Duration) *wire {
	return &wire{
		base:      time.Now(),
		handshake: handshake,
		conns:     make(map[*wireConn]struct{}),
		guids:     make(map[string]chan struct{}),
	}
}

// expect returns a channel closed once a request naming a node of guid has
// been written, and a function that forgets guid.
func (w *wire) expect(guid string) (<-chan struct{}, func()) {
	ch := make(chan struct{})
	w.gmu.Lock()
	w.guids[guid] = ch
	w.nguids.Add(1)
	w.gmu.Unlock()
	return ch, func() {
		w.gmu.Lock()
		defer w.gmu.Unlock()
		if _, ok := w.guids[guid]; ok {
			delete(w.guids, guid)
			w.nguids.Add(-1)
		}
	}
}

var nodeMark = []byte("/" + protectedPrefix)

// written signals the guids named in a request just written: node names
// "_c_<guid>-lock-". A false match, a lock name that looks like a node
// name, only makes a listing early, and the engine lists again.
func (w *wire) written(b []byte) {
	w.gmu.Lock()
	defer w.gmu.Unlock()
	for len(b) > 0 {
		i := bytes.Index(b, nodeMark)
		if i < 0 {
			return
		}
		b = b[i+len(nodeMark):]
		if len(b) < guidLen {
			return
		}
		if ch, ok := w.guids[string(b[:guidLen])]; ok {
			close(ch)
			delete(w.guids, string(b[:guidLen]))
			w.nguids.Add(-1)
		}
	}
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
	wc := &wireConn{Conn: c, w: w}
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

// wireConn is one socket to a server.
type wireConn struct {
	net.Conn
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
	n, err := c.Conn.Read(b)
	if err != nil && c.nhdr == 0 {
		c.w.failure.Store(&err) // e.g. the server refused our client certificate
	}
	if err != nil && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)) && !c.ended {
		c.ended = true // the server closed it, or died
		c.w.refusals.Add(1)
	}
	if n > 0 {
		c.w.lastRead.Store(int64(time.Since(c.w.base)))
		if c.nhdr == 0 {
			c.silent.Stop()
		}
		if c.nhdr < len(c.hdr) {
			c.nhdr += copy(c.hdr[c.nhdr:], b[:n])
			if c.nhdr == len(c.hdr) {
				if ms := int32(binary.BigEndian.Uint32(c.hdr[8:12])); ms > 0 {
					c.w.timeout.Store(int64(time.Duration(ms) * time.Millisecond))
				}
			}
		}
	}
	return n, err
}

// Write is called by go-zookeeper's handshake, then its send loop, with
// one whole request each time.
func (c *wireConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
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
