package zkconn

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	gozk "github.com/go-zookeeper/zk"

	"github.com/orthrus-go/orthrus/internal/async"
)

// minHandshake is the least time a server gets to answer a handshake.
const minHandshake = time.Second

// closeTimeout bounds how long Close waits for go-zookeeper's own
// goroutines after the connection is closed.
const closeTimeout = 10 * time.Second

// Credential is one AddAuth of the session: scheme "digest" with
// "user:password", for instance.
type Credential struct {
	Scheme string
	Cred   []byte
}

// NewCredential checks a credential: a scheme and credentials, and
// "user:password" for the digest scheme.
func NewCredential(scheme, cred string) (Credential, error) {
	switch {
	case scheme == "":
		return Credential{}, errors.New("scheme is empty")
	case cred == "":
		return Credential{}, errors.New("credentials are empty")
	case scheme == "digest" && !strings.Contains(cred, ":"):
		return Credential{}, errors.New(`want "user:password"`)
	}
	return Credential{Scheme: scheme, Cred: []byte(cred)}, nil
}

// ACL is the ACL of the nodes a connection with cfg's credentials creates:
// with credentials, all permissions to the sessions that share them
// (CREATOR_ALL_ACL); without, all permissions to all (OPEN_ACL_UNSAFE).
func (cfg *Config) ACL() []gozk.ACL {
	if len(cfg.Auth) > 0 {
		return gozk.AuthACL(gozk.PermAll)
	}
	return gozk.WorldACL(gozk.PermAll)
}

// Config is what Dial needs. Servers, SessionTimeout and ConnectTimeout are
// required. The callbacks run on go-zookeeper's goroutines (OnEpochLost also
// on the session monitor's) and may run before Dial returns: they must not
// block, nor wait for a request; queueing work (Reap, ParentLeft) is fine.
type Config struct {
	Servers        []string
	SessionTimeout time.Duration // asked of the server
	// ConnectTimeout bounds Dial's wait for a session, and each Do across
	// reconnections.
	ConnectTimeout time.Duration
	Auth           []Credential
	TLS            *tls.Config // nil: plain TCP
	Logger         *slog.Logger
	// ParentLinger: see ParentUsed; 0 leaves parents to the server.
	ParentLinger time.Duration
	// Lazy makes Dial return without waiting for a session (see
	// startLater); requests fail with ErrNoSession (retryable) until then.
	Lazy bool
	// StallTimeout: see stallWatch; 0 never moves the session.
	StallTimeout time.Duration

	// OnEpochLost is told that ep ended: the session expired (reap false),
	// or the ensemble was silent for the session timeout (reap true: the
	// session, and the nodes of ep, may live on).
	OnEpochLost func(ep *Epoch, why string, reap bool)
	// OnDisconnected is told that the connection of ep's session dropped
	// while the session lives: it may come back on another connection, or
	// end (OnEpochLost) within the session timeout.
	OnDisconnected func(ep *Epoch)
	// OnDeleted is told the path of a watched node that was deleted.
	OnDeleted func(path string)
	// OnChanged is told the path of a node whose data changed, which used
	// up the session's watch on it.
	OnChanged func(path string)
}

// Conn is one go-zookeeper connection and its session, with the goroutines
// that serve it: request workers, the session monitor, the reaper and the
// sweeper of empty parents.
// Close ends them all.
type Conn struct {
	cfg    Config
	client *gozk.Conn
	ptr    atomic.Pointer[gozk.Conn] // client, for the event callback
	events <-chan gozk.Event         // closed when go-zookeeper's loop has ended
	wire   *wire
	log    *slog.Logger
	done   chan struct{} // closed when Close begins
	ready  chan struct{} // closed once the first session is authenticated

	// Session state, set by the event callback.
	mu      sync.Mutex
	epoch   atomic.Pointer[Epoch] // the current one; nil before the first session
	up      chan struct{}         // closed while a session is connected
	isUp    bool
	changed chan struct{} // poked on every session event

	work *async.Pool    // request workers
	wg   sync.WaitGroup // monitor, reaper, sweeper, stall watch, startLater

	reapMu   sync.Mutex
	reapQ    []orphan
	reapWake chan struct{}

	// Parents, see parents.go.
	pmu      sync.Mutex
	parents  map[string]*parentState
	idle     []idleParent // oldest first
	idleWake chan struct{}

	closeOnce sync.Once
	closeErr  error
}

// An Epoch is one stretch of one session during which the nodes created in
// it are trusted. It ends (Lost closes) when the session expires, or when
// the ensemble has been silent for the session timeout, after which the
// server may have expired the session unseen. A reconnection to the same
// session after that starts a new epoch.
type Epoch struct {
	sid  int64
	lost chan struct{}
}

// Lost is closed when the epoch ends.
func (ep *Epoch) Lost() <-chan struct{} { return ep.lost }

// IsLost reports whether the epoch ended.
func (ep *Epoch) IsLost() bool { return isClosed(ep.lost) }

// Dial connects to cfg.Servers and waits for a session, at most
// cfg.ConnectTimeout and ctx, then authenticates it with cfg.Auth (again
// after each reconnection: go-zookeeper replays it); a failed AddAuth
// gives an *AuthError. A server that does not answer the handshake within
// the connect timeout (or two thirds of the session timeout, if shorter,
// but at least a second) is left for the next one.
func Dial(ctx context.Context, cfg Config) (*Conn, error) {
	switch {
	case len(cfg.Servers) == 0:
		return nil, errors.New("no servers")
	case cfg.SessionTimeout <= 0 || cfg.ConnectTimeout <= 0:
		return nil, errors.New("session and connect timeouts must be positive")
	}
	for _, s := range cfg.Servers {
		if strings.TrimSpace(s) == "" {
			return nil, errors.New("empty server address")
		}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	c := &Conn{
		cfg:      cfg,
		log:      cfg.Logger,
		wire:     newWire(max(min(cfg.ConnectTimeout, cfg.SessionTimeout*2/3), minHandshake), cfg.TLS),
		done:     make(chan struct{}),
		ready:    make(chan struct{}),
		up:       make(chan struct{}),
		changed:  make(chan struct{}, 1),
		work:     async.NewPool(),
		reapWake: make(chan struct{}, 1),
		parents:  make(map[string]*parentState),
		idleWake: make(chan struct{}, 1),
	}
	client, events, err := gozk.Connect(cfg.Servers, cfg.SessionTimeout,
		gozk.WithDialer(c.wire.dial),
		gozk.WithLogger(logger{cfg.Logger}),
		gozk.WithLogInfo(false),
		gozk.WithEventCallback(c.onEvent),
	)
	if err != nil {
		return nil, err // an address that does not resolve
	}
	c.client, c.events = client, events
	c.ptr.Store(client)
	c.sync(client) // events before the Store were not acted on
	c.wg.Add(3)
	go c.monitor()
	go c.reaper()
	go c.sweeper()
	if cfg.Lazy {
		c.wg.Add(1)
		go c.startLater()
		c.startStallWatch()
		return c, nil
	}
	err = c.waitSession(ctx)
	if err == nil {
		err = c.authenticate(ctx)
	}
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	c.startStallWatch()
	return c, nil
}

// authenticate adds the credentials to the session (go-zookeeper sends
// them again at each reconnection) and lets requests through.
func (c *Conn) authenticate(ctx context.Context) error {
	for _, a := range c.cfg.Auth {
		_, err := retry(ctx, c, func() (struct{}, error) { return struct{}{}, c.client.AddAuth(a.Scheme, a.Cred) }, false, false)
		if err != nil {
			return &AuthError{Scheme: a.Scheme, Err: err}
		}
	}
	if got := c.liveness(); got != c.cfg.SessionTimeout {
		c.log.Info("zk: the server changed the session timeout", "asked", c.cfg.SessionTimeout, "granted", got)
	}
	close(c.ready)
	return nil
}

// startLater authenticates a Lazy connection's session: it waits for
// sessions until one is authenticated, or until Close.
func (c *Conn) startLater() {
	defer c.wg.Done()
	backoff := time.Second
	for {
		select {
		case <-c.done:
			return
		case <-c.Up():
		}
		// Each attempt ends by the connect timeout, or at Close.
		err := c.authenticate(context.Background())
		if err == nil || c.Closing() {
			return
		}
		c.log.Error("zk: cannot authenticate the session; trying again", "err", err, "after", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-c.done:
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(backoff*2, 30*time.Second)
	}
}

// stallWatch closes the session's socket when the server has left a
// request unanswered for the stall timeout: a server that froze (or lost
// its leader and cannot serve writes) keeps its socket open, and
// go-zookeeper would wait its receive timeout (two thirds of the session
// timeout) before it tried another server. A member of a healthy ensemble
// answers in milliseconds; one that cannot is the ensemble's business, and
// the session moves on, keeping its nodes, within the session timeout.
func (c *Conn) stallWatch() {
	defer c.wg.Done()
	t := time.NewTicker(c.cfg.StallTimeout / 4)
	defer t.Stop()
	for {
		select {
		case <-c.done:
			return
		case <-t.C:
		}
		if d := c.wire.waiting(); d >= c.cfg.StallTimeout {
			c.log.Debug("zk: the server left a request unanswered; trying the next one", "for", d)
			c.wire.cut()
		}
	}
}

// startStallWatch starts stallWatch, over several servers with a stall
// timeout.
func (c *Conn) startStallWatch() {
	if c.cfg.StallTimeout > 0 && len(c.cfg.Servers) > 1 {
		c.wg.Add(1)
		go c.stallWatch()
	}
}

// AuthError is a failed AddAuth in Dial.
type AuthError struct {
	Scheme string
	Err    error
}

func (e *AuthError) Error() string { return fmt.Sprintf("auth %q: %v", e.Scheme, e.Err) }
func (e *AuthError) Unwrap() error { return e.Err }

// waitSession waits for the first session, at most the connect timeout.
func (c *Conn) waitSession(ctx context.Context) error {
	timer := time.NewTimer(c.cfg.ConnectTimeout)
	defer timer.Stop()
	var err error
	select {
	case <-c.Up():
		return nil
	case <-timer.C:
		err = fmt.Errorf("no session within %v", c.cfg.ConnectTimeout)
	case <-ctx.Done():
		err = fmt.Errorf("no session: %w", ctx.Err())
	}
	return c.wire.explain(err)
}

// Ready is closed once the first session is authenticated: at once after a
// Dial that was not Lazy.
func (c *Conn) Ready() <-chan struct{} { return c.ready }

// Client is the go-zookeeper connection, for requests run through Do.
func (c *Conn) Client() *gozk.Conn { return c.client }

// ACL is the ACL of the nodes the connection creates (Config.ACL).
func (c *Conn) ACL() []gozk.ACL { return c.cfg.ACL() }

// Done is closed when Close begins.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Closing reports whether Close has begun.
func (c *Conn) Closing() bool { return isClosed(c.done) }

// ConnectTimeout is the bound of each Do.
func (c *Conn) ConnectTimeout() time.Duration { return c.cfg.ConnectTimeout }

// Epoch is the current epoch; nil before the first session. Nodes are
// trusted while it is not lost.
func (c *Conn) Epoch() *Epoch { return c.epoch.Load() }

// Close stops the connection's goroutines and ends the session, which makes
// the server delete its ephemeral nodes at once, then waits for every
// goroutine, go-zookeeper's included, at most about ten seconds with an
// ensemble that does not answer. Requests in flight fail with ErrClosed.
// Close is idempotent.
func (c *Conn) Close() error {
	c.closeOnce.Do(func() {
		close(c.done)
		c.work.Stop()
		// A graceful close first: the server ends the session and deletes
		// its nodes at once. Then the sockets, in case a handshake with a
		// frozen server holds go-zookeeper's loop. Without a session there
		// is nothing to end gracefully: the sockets go first, so that
		// go-zookeeper does not wait a second for an answer to its close.
		c.mu.Lock()
		up := c.isUp
		c.mu.Unlock()
		if !up {
			c.wire.close()
		}
		c.client.Close()
		c.wire.close()
		_ = c.work.Close(context.Background()) // the closed client fails every request
		c.wg.Wait()
		c.closeErr = c.drain()
	})
	return c.closeErr
}

// drain waits for go-zookeeper's loop to end: it closes the event channel.
func (c *Conn) drain() error {
	timer := time.NewTimer(closeTimeout)
	defer timer.Stop()
	for {
		select {
		case _, ok := <-c.events:
			if !ok {
				return nil
			}
		case <-timer.C:
			c.log.Warn("zk: go-zookeeper's connection loop did not end", "waited", closeTimeout)
			return fmt.Errorf("zk: connection still closing after %v", closeTimeout)
		}
	}
}

// onEvent is go-zookeeper's event callback. It runs on go-zookeeper's
// goroutines and must not block; it never calls into go-zookeeper.
func (c *Conn) onEvent(ev gozk.Event) {
	switch ev.Type {
	case gozk.EventSession:
		if cl := c.ptr.Load(); cl != nil {
			c.sync(cl)
		}
	case gozk.EventNodeDeleted:
		if c.cfg.OnDeleted != nil {
			c.cfg.OnDeleted(ev.Path)
		}
	case gozk.EventNodeDataChanged:
		if c.cfg.OnChanged != nil {
			c.cfg.OnChanged(ev.Path)
		}
	}
}

// sync brings the view of the session up to date with cl's. It reads
// cl's current state rather than trusting the order of events: a session
// ID other than the current epoch's means that session is over.
func (c *Conn) sync(cl *gozk.Conn) {
	state, sid := cl.State(), cl.SessionID()
	c.mu.Lock()
	var lost, dropped *Epoch
	ep := c.epoch.Load()
	switch {
	case state == gozk.StateHasSession:
		if ep != nil && ep.sid != sid {
			lost = c.endLocked()
		}
		if ep == nil || ep.sid != sid || ep.IsLost() {
			c.epoch.Store(&Epoch{sid: sid, lost: make(chan struct{})})
		}
		c.setUpLocked(true)
	case state == gozk.StateExpired || (sid == 0 && ep != nil):
		lost = c.endLocked()
		c.setUpLocked(false)
	default:
		if c.isUp && ep != nil && !ep.IsLost() {
			dropped = ep
		}
		c.setUpLocked(false)
	}
	c.mu.Unlock()
	c.epochLost(lost, "session expired", false)
	if dropped != nil && c.cfg.OnDisconnected != nil {
		c.cfg.OnDisconnected(dropped)
	}
	poke(c.changed)
}

// endLocked ends the current epoch and returns it; nil when there is none
// to end. Called with c.mu held.
func (c *Conn) endLocked() *Epoch {
	ep := c.epoch.Load()
	if ep == nil || ep.IsLost() {
		return nil
	}
	close(ep.lost)
	return ep
}

func (c *Conn) epochLost(ep *Epoch, why string, reap bool) {
	if ep != nil && c.cfg.OnEpochLost != nil {
		c.cfg.OnEpochLost(ep, why, reap)
	}
}

func (c *Conn) setUpLocked(up bool) {
	switch {
	case up && !c.isUp:
		close(c.up)
		c.isUp = true
	case !up && c.isUp:
		c.up = make(chan struct{})
		c.isUp = false
	}
}

// Up returns a channel that is closed while a session is connected.
func (c *Conn) Up() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.up
}

// Refused tells that the connection is certainly cut off from the
// ensemble: since the last connection accepted, the last connection to
// each server was refused, or ended by the server (which a kill does),
// rather than timed out; so no session can be connected. It reads the
// sockets, not the session state, which go-zookeeper reports a moment
// later: a health check right after a kill must see it. A server that is
// only slow is not counted: its connection is accepted.
func (c *Conn) Refused() bool {
	return c.wire.refusals.Load() >= int32(len(c.cfg.Servers))
}

// Explain adds to err why the last socket failed before its server
// answered, if one did (a refused certificate, a server that is not
// ZooKeeper): the caller that sees Refused says why.
func (c *Conn) Explain(err error) error { return c.wire.explain(err) }

// liveness is the session timeout the server granted, or the one asked for
// until it has answered.
func (c *Conn) liveness() time.Duration {
	if d := time.Duration(c.wire.timeout.Load()); d > 0 {
		return d
	}
	return c.cfg.SessionTimeout
}

// monitor ends the epoch when the connection is down and the ensemble has
// been silent for the session timeout: past that, the server may have
// expired the session and granted its locks to others, so its nodes are
// given up even before a reconnection confirms it.
func (c *Conn) monitor() {
	defer c.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		c.mu.Lock()
		ep := c.epoch.Load()
		armed := !c.isUp && ep != nil && !ep.IsLost()
		c.mu.Unlock()
		wait := time.Hour
		if armed {
			wait = max(c.liveness()-c.wire.silence(), 0)
		}
		timer.Reset(wait)
		select {
		case <-c.done:
			return
		case <-c.changed:
		case <-timer.C:
			if armed {
				c.suspect()
			}
		}
	}
}

// suspect ends the epoch if the ensemble is still silent.
func (c *Conn) suspect() {
	c.mu.Lock()
	var lost *Epoch
	if !c.isUp && c.wire.silence() >= c.liveness() {
		lost = c.endLocked()
	}
	c.mu.Unlock()
	c.epochLost(lost, "no answer from ZooKeeper for the session timeout", true)
}

// logger sends go-zookeeper's messages to slog at Debug level.
type logger struct{ log *slog.Logger }

func (l logger) Printf(format string, args ...any) {
	if l.log.Enabled(context.Background(), slog.LevelDebug) {
		l.log.Debug("zk: client: " + fmt.Sprintf(format, args...))
	}
}

func poke(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
