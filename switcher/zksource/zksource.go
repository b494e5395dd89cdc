package zksource

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	gozk "github.com/go-zookeeper/zk"

	"github.com/orthrus-go/orthrus/internal/zkconn"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/switcher"
)

// Bounds of the retry loop.
const (
	minBackoff = 100 * time.Millisecond
	maxBackoff = 5 * time.Second
)

// Source is a switcher.Source and switcher.Setter over one ZooKeeper node.
type Source struct {
	conn *gozk.Conn
	path string
	acl  []gozk.ACL
	log  *slog.Logger
	// roster orders announcements and retractions: an announcement its
	// caller gave up on runs on, over several requests, and must end
	// before a retraction begins, or it recreates what was retracted; one
	// not begun by then must not begin (retracted, guarded by mu).
	roster    sync.Mutex
	mu        sync.Mutex
	retracted map[string]bool
}

var (
	_ switcher.Source   = (*Source)(nil)
	_ switcher.Setter   = (*Source)(nil)
	_ switcher.Proposer = (*Source)(nil)
)

type settings struct {
	logger *slog.Logger
	acl    []gozk.ACL
}

// Option configures a Source.
type Option func(*settings) error

// WithLogger sets the logger for skipped values and watch failures.
// Default: slog.Default().
func WithLogger(l *slog.Logger) Option {
	return func(s *settings) error {
		if l == nil {
			return fmt.Errorf("zksource: WithLogger: %w: logger is nil", locker.ErrInvalidArgument)
		}
		s.logger = l
		return nil
	}
}

// WithACL sets the ACL of the nodes Set creates, for instance
// gozk.AuthACL(gozk.PermAll) on a connection with credentials.
// Default: gozk.WorldACL(gozk.PermAll), open to all.
func WithACL(acl []gozk.ACL) Option {
	return func(s *settings) error {
		if len(acl) == 0 {
			return fmt.Errorf("zksource: WithACL: %w: acl is empty", locker.ErrInvalidArgument)
		}
		s.acl = acl
		return nil
	}
}

// New returns a source over the node at path, an absolute ZooKeeper path
// such as "/myapp/orthrus/active". It makes no request: Watch and Set do.
// The source never closes conn.
func New(conn *gozk.Conn, path string, opts ...Option) (*Source, error) {
	if conn == nil {
		return nil, fmt.Errorf("zksource: New: %w: conn is nil", locker.ErrInvalidArgument)
	}
	if err := zkconn.CheckPath(path); err != nil {
		return nil, fmt.Errorf("zksource: New(%q): %w: %v", path, locker.ErrInvalidArgument, err)
	}
	s := settings{logger: slog.Default(), acl: gozk.WorldACL(gozk.PermAll)}
	for _, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("zksource: New: %w: nil Option", locker.ErrInvalidArgument)
		}
		if err := opt(&s); err != nil {
			return nil, err
		}
	}
	return &Source{conn: conn, path: path, acl: s.acl, log: s.logger.With("source", "zk", "path", path)}, nil
}

// Path returns the watched node's path.
func (s *Source) Path() string { return s.path }

// Set writes engine to the node, creating it and its missing parents, so
// that every switcher watching it switches to engine. It does not check the
// name: a switcher that has no such engine logs it and keeps its current
// one.
func (s *Source) Set(ctx context.Context, engine string) error {
	if strings.TrimSpace(engine) == "" {
		return fmt.Errorf("zksource: set %q: %w: engine name is empty", s.path, locker.ErrInvalidArgument)
	}
	_, err := zkconn.Call(ctx, func() (struct{}, error) { return struct{}{}, s.set([]byte(engine)) })
	if err != nil {
		if zkconn.Answered(err) { // no permission, bad ACL: not an outage
			return fmt.Errorf("zksource: set %q: %w", s.path, err)
		}
		return fmt.Errorf("zksource: set %q: %w: %w", s.path, locker.ErrUnavailable, err)
	}
	return nil
}

func (s *Source) set(data []byte) error {
	_, err := s.conn.Set(s.path, data, -1)
	if !errors.Is(err, gozk.ErrNoNode) {
		return err
	}
	err = s.create(data)
	if errors.Is(err, gozk.ErrNodeExists) { // created meanwhile: ours is the later write
		_, err = s.conn.Set(s.path, data, -1)
	}
	return err
}

// create creates the node with data, and its missing parents.
func (s *Source) create(data []byte) error {
	for _, p := range zkconn.Ancestors(s.path) {
		if _, err := s.conn.Create(p, nil, 0, s.acl); err != nil && !errors.Is(err, gozk.ErrNodeExists) {
			return err
		}
	}
	_, err := s.conn.Create(s.path, data, 0, s.acl)
	return err
}

// Propose implements switcher.Proposer: it sets engine if the node's version
// still matches the epoch from (the node's version plus one), and reads the
// node back when another writer was first. From 0 the node must not exist:
// it is created (with its missing parents), and of the processes that
// propose on a node never written, one creates it and the others, whose
// create fails with NodeExists, follow it.
func (s *Source) Propose(ctx context.Context, from uint64, engine string) (switcher.Desired, bool, error) {
	if strings.TrimSpace(engine) == "" {
		return switcher.Desired{}, false, fmt.Errorf("zksource: propose %q: %w: engine name is empty", s.path, locker.ErrInvalidArgument)
	}
	p, err := zkconn.Call(ctx, func() (proposal, error) { return s.propose(from, engine) })
	if err != nil {
		return switcher.Desired{}, false, fmt.Errorf("zksource: propose %q: %w: %w", s.path, locker.ErrUnavailable, err)
	}
	return p.d, p.won, nil
}

type proposal struct {
	d   switcher.Desired
	won bool
}

func (s *Source) propose(from uint64, engine string) (proposal, error) {
	var err error
	if from == 0 {
		if err = s.create([]byte(engine)); err == nil {
			return proposal{switcher.Desired{Engine: engine, Epoch: 1}, true}, nil
		}
	} else {
		var st *gozk.Stat
		if st, err = s.conn.Set(s.path, []byte(engine), int32(from-1)); err == nil {
			return proposal{switcher.Desired{Engine: engine, Epoch: uint64(st.Version) + 1}, true}, nil
		}
	}
	if !errors.Is(err, gozk.ErrBadVersion) && !errors.Is(err, gozk.ErrNodeExists) && !errors.Is(err, gozk.ErrNoNode) {
		return proposal{}, err
	}
	data, st, err := s.conn.Get(s.path)
	if errors.Is(err, gozk.ErrNoNode) { // deleted meanwhile: nothing to follow but the proposal
		return s.propose(0, engine)
	}
	if err != nil {
		return proposal{}, err
	}
	return proposal{d: switcher.Desired{Engine: strings.TrimSpace(string(data)), Epoch: uint64(st.Version) + 1}}, nil
}

// Read implements switcher.Proposer: the node's data at its epoch; ok is
// false when the node does not exist or is empty.
func (s *Source) Read(ctx context.Context) (switcher.Desired, bool, error) {
	got, err := zkconn.Call(ctx, func() (getResult, error) {
		data, stat, err := s.conn.Get(s.path)
		return getResult{data: data, stat: stat}, err
	})
	switch {
	case errors.Is(err, gozk.ErrNoNode):
		return switcher.Desired{}, false, nil
	case err != nil && zkconn.Answered(err): // no permission: not an outage
		return switcher.Desired{}, false, fmt.Errorf("zksource: read %q: %w", s.path, err)
	case err != nil:
		return switcher.Desired{}, false, fmt.Errorf("zksource: read %q: %w: %w", s.path, locker.ErrUnavailable, err)
	}
	d, ok := s.desired(got.data, got.stat.Version)
	return d, ok, nil
}

// Watch calls apply with the node's data, then with every change, until
// ctx is done; then it returns nil. A missing node is waited for; a failed
// read is logged and retried with backoff.
func (s *Source) Watch(ctx context.Context, apply func(switcher.Desired)) error {
	if apply == nil {
		return fmt.Errorf("zksource: watch %q: %w: apply is nil", s.path, locker.ErrInvalidArgument)
	}
	backoff := minBackoff
	missing := false // logged that the node is missing
	for {
		ch, exists, err := s.read(ctx, apply)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			s.log.Warn("zksource: cannot read the node; retrying", "err", err, "retry_in", backoff)
			if !pause(ctx, backoff) {
				return nil
			}
			backoff = min(2*backoff, maxBackoff)
			continue
		}
		backoff = minBackoff
		if !exists && !missing {
			s.log.Info("zksource: the node does not exist yet; waiting for it")
		}
		missing = !exists
		if ch == nil {
			continue // created between the two reads
		}
		select {
		case <-ctx.Done():
			return nil
		case ev := <-ch:
			switch ev.Type {
			case gozk.EventNodeDeleted:
				s.log.Warn("zksource: the node was deleted; keeping the current engine")
			case gozk.EventNotWatching:
				s.log.Info("zksource: watch ended; reading the node again", "err", ev.Err)
			}
		}
	}
}

type getResult struct {
	data []byte
	stat *gozk.Stat
	ch   <-chan gozk.Event
}

type existsResult struct {
	ok bool
	ch <-chan gozk.Event
}

// read applies the node's data and returns a watch on the node. When the
// node does not exist, the watch fires on its creation; when it was created
// between the two reads, the channel is nil.
func (s *Source) read(ctx context.Context, apply func(switcher.Desired)) (<-chan gozk.Event, bool, error) {
	got, err := zkconn.Call(ctx, func() (getResult, error) {
		data, stat, ch, err := s.conn.GetW(s.path)
		return getResult{data, stat, ch}, err
	})
	if err == nil {
		s.apply(got.data, got.stat.Version, apply)
		return got.ch, true, nil
	}
	if !errors.Is(err, gozk.ErrNoNode) {
		return nil, false, err
	}
	ex, err := zkconn.Call(ctx, func() (existsResult, error) {
		ok, _, ch, err := s.conn.ExistsW(s.path)
		return existsResult{ok, ch}, err
	})
	if err != nil {
		return nil, false, err
	}
	if ex.ok {
		return nil, true, nil
	}
	return ex.ch, false, nil
}

func (s *Source) apply(data []byte, version int32, apply func(switcher.Desired)) {
	if d, ok := s.desired(data, version); ok {
		apply(d)
	}
}

// desired returns what the node's data at version asks for, at the epoch
// version+1 (a new node's version is 0); false (logged) for empty data,
// which names no engine.
func (s *Source) desired(data []byte, version int32) (switcher.Desired, bool) {
	name := strings.TrimSpace(string(data))
	if name == "" {
		s.log.Warn("zksource: the node is empty; ignoring it", "version", version)
		return switcher.Desired{}, false
	}
	return switcher.Desired{Engine: name, Epoch: uint64(version) + 1}, true
}

// pause waits d, or less when ctx is done first; it reports whether ctx is
// still alive.
func pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
