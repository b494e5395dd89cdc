package redlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/orthrus-go/orthrus/engines/redis"
	"github.com/orthrus-go/orthrus/internal/async"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/driver"
)

// Engine is the Redlock engine over independent Redis masters. It
// implements locker.Engine.
type Engine struct {
	name    string
	prefix  string
	nodes   []goredis.UniversalClient
	all     []int // 0..len(nodes)-1, the nodes every fan-out asks
	quorum  int
	timeout time.Duration // per node and request
	idle    int64         // fence idle ms
	log     *slog.Logger
	core    *driver.Core
	work    *async.Pool // the per-node requests, which outlive a caller that gives up
	hub     *hub
}

var (
	_ locker.Engine           = (*Engine)(nil)
	_ driver.Backend          = (*Engine)(nil)
	_ driver.Renewer          = (*Engine)(nil)
	_ driver.MinTTLer         = (*Engine)(nil)
	_ driver.DeadlineHonourer = (*Engine)(nil)
)

// MinNodes is the fewest nodes New accepts: with fewer, a majority is every
// node, and one failure stops the engine.
const MinNodes = 3

// New returns an engine over nodes, each a client of one independent Redis
// master (no replicas between them: see the package doc). At least
// MinNodes, each a different server; an even count works but tolerates no
// more failures than one node fewer, which New logs as a warning. The
// engine never closes the clients.
func New(nodes []goredis.UniversalClient, opts ...Option) (*Engine, error) {
	s := settings{name: "redlock", prefix: "orthrus", timeout: DefaultNodeTimeout, logger: slog.Default()}
	for _, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("redlock: New: %w: nil Option", locker.ErrInvalidArgument)
		}
		if err := opt(&s); err != nil {
			return nil, err
		}
	}
	if err := checkNodes(nodes); err != nil {
		return nil, err
	}
	logger := s.logger.With("engine", s.name)
	if len(nodes)%2 == 0 {
		logger.Warn("redlock: an even number of nodes tolerates no more failures than one node fewer",
			"nodes", len(nodes), "tolerates", (len(nodes)-1)/2)
	}
	e := &Engine{
		name: s.name, prefix: s.prefix, nodes: append([]goredis.UniversalClient(nil), nodes...),
		quorum: len(nodes)/2 + 1, timeout: s.timeout, idle: redis.DefaultFenceIdle.Milliseconds(),
		log: logger, work: async.NewPool(),
	}
	for i := range nodes {
		e.all = append(e.all, i)
	}
	e.hub = newHub(e)
	e.core = driver.NewCore(s.name, e, logger, driver.ObservedBy(s.observer))
	return e, nil
}

// checkNodes refuses fewer than MinNodes nodes, a nil one, a client of
// several servers (Cluster, Ring) and the same server twice.
func checkNodes(nodes []goredis.UniversalClient) error {
	if len(nodes) < MinNodes {
		return fmt.Errorf("redlock: New: nodes: %w: %d nodes; want at least %d independent Redis masters", locker.ErrInvalidArgument, len(nodes), MinNodes)
	}
	seen := make(map[string]int, len(nodes))
	for i, n := range nodes {
		c, ok := n.(*goredis.Client)
		if !ok {
			return fmt.Errorf("redlock: New: nodes[%d]: %w: %T; want a client of one server (*redis.Client)", i, locker.ErrInvalidArgument, n)
		}
		o := c.Options()
		key := fmt.Sprintf("%s/%d", o.Addr, o.DB)
		if o.Addr == "FailoverClient" { // Sentinel: the address is its masters'
			key = fmt.Sprintf("%p", c)
		}
		if j, dup := seen[key]; dup {
			return fmt.Errorf("redlock: New: nodes[%d]: %w: %s is nodes[%d] again; want independent servers", i, locker.ErrInvalidArgument, o.Addr, j)
		}
		seen[key] = i
	}
	return nil
}

// Name returns the engine's name.
func (e *Engine) Name() string { return e.name }

// Quorum is how many nodes make a majority: len(nodes)/2 + 1.
func (e *Engine) Quorum() int { return e.quorum }

// MinTTL is the shortest TTL the engine accepts: MinTTLFor its node
// timeout.
func (e *Engine) MinTTL() time.Duration { return MinTTLFor(e.timeout) }

// MinTTLFor is the shortest TTL an engine of node timeout d accepts: a
// grant must keep a positive validity after its slowest acquisition (two
// rounds of one node timeout each) and the clock drift allowance, with the
// single-node engine's floor (redis.MinTTL) left for renewals to get
// through.
func MinTTLFor(d time.Duration) time.Duration { return redis.MinTTL + 2*d }

// HonoursDeadlines implements driver.DeadlineHonourer: every request
// returns by its context's end, leaving late nodes to the engine's workers.
func (e *Engine) HonoursDeadlines() bool { return true }

// NewLocker returns a new owner's Locker for name.
func (e *Engine) NewLocker(name string, opts ...locker.Option) (locker.Handle, error) {
	return e.core.NewLocker(name, opts...)
}

// errFamily explains why the lock family is refused.
var errFamily = fmt.Errorf("redlock: read-write locks and semaphores over a quorum of independent nodes are out of scope (their grant rules need one authoritative queue, which Redlock does not have; use engines/redis, etcd or zk): %w", errors.ErrUnsupported)

// NewRWLock returns an error wrapping errors.ErrUnsupported: see errFamily.
func (e *Engine) NewRWLock(string, ...locker.Option) (locker.RWLock, error) { return nil, errFamily }

// NewSemaphore returns an error wrapping errors.ErrUnsupported: see errFamily.
func (e *Engine) NewSemaphore(string, int, ...locker.Option) (locker.Semaphore, error) {
	return nil, errFamily
}

// Ping reports whether a majority of the nodes answers.
func (e *Engine) Ping(ctx context.Context) error {
	errs, err := e.PingNodes(ctx)
	if err != nil {
		return err
	}
	ok := 0
	for _, nerr := range errs {
		if nerr == nil {
			ok++
		}
	}
	if ok < e.quorum {
		return e.unavailable(ctx, "ping", "", ok, slices.DeleteFunc(errs, func(err error) bool { return err == nil }))
	}
	return nil
}

// PingNodes asks every node within ctx and the node timeout and returns
// each one's error, by index of New's clients (nil: it answered): what
// Ping counts, for a status that names the nodes down while a quorum
// answers. The error is ErrClosed after Close.
func (e *Engine) PingNodes(ctx context.Context) ([]error, error) {
	if e.core.Closed() {
		return nil, fmt.Errorf("redlock: ping: %w", locker.ErrClosed)
	}
	errs := make([]error, len(e.nodes))
	for i := range errs {
		errs[i] = fmt.Errorf("node %d: %w within the node timeout (%v)", i, errNoAnswer, e.timeout)
	}
	for _, a := range fanOut(ctx, e, e.all, func(ctx context.Context, i int) (struct{}, error) {
		return struct{}{}, e.nodes[i].Ping(ctx).Err()
	}, nil) {
		errs[a.node] = a.failure()
	}
	return errs, nil
}

// Close releases the holds still held, stops the renewals and the
// subscriptions, and waits for the requests still out. It does not close
// the clients.
func (e *Engine) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), driver.DefaultReleaseTimeout)
	defer cancel()
	err := e.core.Close(ctx)
	e.hub.close()
	if werr := e.work.Close(ctx); werr != nil {
		e.log.Warn("redlock: requests still out at close, cancelled")
	}
	return err
}

// LockKey returns the key of the named lock on every node: a string
// "<token>:<owner>" with a TTL, as the single-node engine's.
func (e *Engine) LockKey(name string) string {
	return e.prefix + ":{" + nameEscaper.Replace(name) + "}"
}

// Suffixes of the counter key and the release channel (unlock.lua's).
const (
	fenceSuffix   = ":fence"
	channelSuffix = ":wake"
)

var nameEscaper = strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D")
