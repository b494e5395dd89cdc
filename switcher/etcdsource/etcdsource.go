package etcdsource

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/switcher"
)

// Bounds of the retry loop and of each request.
const (
	minBackoff     = 100 * time.Millisecond
	maxBackoff     = 5 * time.Second
	requestTimeout = 5 * time.Second
)

// errCompacted: the watch started before the oldest revision etcd keeps.
var errCompacted = errors.New("compacted")

// Source is a switcher.Source and switcher.Setter over one etcd key.
type Source struct {
	client *clientv3.Client
	key    string
	log    *slog.Logger

	amu   sync.Mutex       // guards lease
	lease clientv3.LeaseID // of the announced Members; NoLease before the first

	// beforeWatch, set only by tests, runs between the read of the key and
	// the start of the watch.
	beforeWatch func()
}

var (
	_ switcher.Source   = (*Source)(nil)
	_ switcher.Setter   = (*Source)(nil)
	_ switcher.Proposer = (*Source)(nil)
)

type settings struct {
	logger *slog.Logger
}

// Option configures a Source.
type Option func(*settings) error

// WithLogger sets the logger for skipped values and watch failures.
// Default: slog.Default().
func WithLogger(l *slog.Logger) Option {
	return func(s *settings) error {
		if l == nil {
			return fmt.Errorf("etcdsource: WithLogger: %w: logger is nil", locker.ErrInvalidArgument)
		}
		s.logger = l
		return nil
	}
}

// New returns a source over key. It makes no request: Watch and Set do. The
// source never closes client.
func New(client *clientv3.Client, key string, opts ...Option) (*Source, error) {
	if client == nil {
		return nil, fmt.Errorf("etcdsource: New: %w: client is nil", locker.ErrInvalidArgument)
	}
	if key == "" {
		return nil, fmt.Errorf("etcdsource: New: %w: key is empty", locker.ErrInvalidArgument)
	}
	s := settings{logger: slog.Default()}
	for _, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("etcdsource: New: %w: nil Option", locker.ErrInvalidArgument)
		}
		if err := opt(&s); err != nil {
			return nil, err
		}
	}
	return &Source{client: client, key: key, log: s.logger.With("source", "etcd", "key", key)}, nil
}

// Key returns the watched key.
func (s *Source) Key() string { return s.key }

// Set writes engine to the key, so that every switcher watching it
// switches to engine. It does not check the name: a switcher that has no
// such engine logs it and keeps its current one.
func (s *Source) Set(ctx context.Context, engine string) error {
	if strings.TrimSpace(engine) == "" {
		return fmt.Errorf("etcdsource: set %q: %w: engine name is empty", s.key, locker.ErrInvalidArgument)
	}
	if _, err := s.client.Put(ctx, s.key, engine); err != nil {
		return fmt.Errorf("etcdsource: set %q: %w: %w", s.key, locker.ErrUnavailable, err)
	}
	return nil
}

// Propose implements switcher.Proposer: it puts engine if the key's version
// is still from, in one transaction that reads the key back when another
// writer was first. The key's version is the epoch. From 0 the key must
// not exist (etcd's version of a missing key is 0, and a deletion resets
// it): of the processes that propose on a key never written, one creates
// it and the others follow.
func (s *Source) Propose(ctx context.Context, from uint64, engine string) (switcher.Desired, bool, error) {
	if strings.TrimSpace(engine) == "" {
		return switcher.Desired{}, false, fmt.Errorf("etcdsource: propose %q: %w: engine name is empty", s.key, locker.ErrInvalidArgument)
	}
	resp, err := s.client.Txn(ctx).
		If(clientv3.Compare(clientv3.Version(s.key), "=", int64(from))).
		Then(clientv3.OpPut(s.key, engine)).
		Else(clientv3.OpGet(s.key)).
		Commit()
	if err != nil {
		return switcher.Desired{}, false, fmt.Errorf("etcdsource: propose %q: %w: %w", s.key, locker.ErrUnavailable, err)
	}
	if resp.Succeeded {
		return switcher.Desired{Engine: engine, Epoch: from + 1}, true, nil
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 { // deleted meanwhile: nothing to follow but the proposal
		return s.Propose(ctx, 0, engine)
	}
	return switcher.Desired{Engine: strings.TrimSpace(string(kvs[0].Value)), Epoch: uint64(kvs[0].Version)}, false, nil
}

// Read implements switcher.Proposer: the key's value at its version; ok is
// false when the key does not exist or is empty.
func (s *Source) Read(ctx context.Context) (switcher.Desired, bool, error) {
	resp, err := s.client.Get(ctx, s.key)
	if err != nil {
		return switcher.Desired{}, false, fmt.Errorf("etcdsource: read %q: %w: %w", s.key, locker.ErrUnavailable, err)
	}
	if len(resp.Kvs) == 0 {
		return switcher.Desired{}, false, nil
	}
	d, ok := s.desired(resp.Kvs[0].Value, resp.Kvs[0].Version)
	return d, ok, nil
}

// Watch calls apply with the key's value, then with every value PUT, until
// ctx is done; then it returns nil. A failed read or watch is logged and
// retried with backoff; a DELETE is logged and ignored.
func (s *Source) Watch(ctx context.Context, apply func(switcher.Desired)) error {
	if apply == nil {
		return fmt.Errorf("etcdsource: watch %q: %w: apply is nil", s.key, locker.ErrInvalidArgument)
	}
	backoff := minBackoff
	for {
		rev, err := s.read(ctx, apply)
		if err == nil {
			backoff = minBackoff
			if s.beforeWatch != nil {
				s.beforeWatch()
			}
			err = s.follow(ctx, rev+1, apply)
		}
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, errCompacted) {
			// Not a failure: the key's history is gone, its value is not.
			s.log.Info("etcdsource: watch compacted; reading the key again", "err", err)
			continue
		}
		s.log.Warn("etcdsource: watch failed; reading the key again", "err", err, "retry_in", backoff)
		if !pause(ctx, backoff) {
			return nil
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// read applies the key's current value and returns the revision it was
// read at.
func (s *Source) read(ctx context.Context, apply func(switcher.Desired)) (int64, error) {
	rctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	resp, err := s.client.Get(rctx, s.key)
	if err != nil {
		return 0, fmt.Errorf("etcdsource: get %q: %w", s.key, err)
	}
	if len(resp.Kvs) == 0 {
		s.log.Info("etcdsource: the key does not exist yet; waiting for a value")
	} else {
		s.apply(resp.Kvs[0].Value, resp.Kvs[0].Version, apply)
	}
	return resp.Header.Revision, nil
}

// follow applies every PUT from revision rev until ctx is done (nil) or the
// watch fails (an error).
func (s *Source) follow(ctx context.Context, rev int64, apply func(switcher.Desired)) error {
	// A watcher of our own, closed on return, so that nothing of this watch
	// outlives it whatever state the stream is in.
	w := clientv3.NewWatcher(s.client)
	defer w.Close()
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for resp := range w.Watch(wctx, s.key, clientv3.WithRev(rev)) {
		if resp.CompactRevision != 0 {
			return fmt.Errorf("etcdsource: watch %q: %w at revision %d", s.key, errCompacted, resp.CompactRevision)
		}
		if err := resp.Err(); err != nil {
			return fmt.Errorf("etcdsource: watch %q: %w", s.key, err)
		}
		for _, ev := range resp.Events {
			switch ev.Type {
			case clientv3.EventTypePut:
				s.apply(ev.Kv.Value, ev.Kv.Version, apply)
			case clientv3.EventTypeDelete:
				s.log.Warn("etcdsource: the key was deleted; keeping the current engine")
			}
		}
	}
	if ctx.Err() != nil {
		return nil
	}
	return errors.New("etcdsource: watch channel closed")
}

func (s *Source) apply(value []byte, version int64, apply func(switcher.Desired)) {
	if d, ok := s.desired(value, version); ok {
		apply(d)
	}
}

// desired returns what a value of the key at version asks for; false
// (logged) for an empty value, which names no engine.
func (s *Source) desired(value []byte, version int64) (switcher.Desired, bool) {
	name := strings.TrimSpace(string(value))
	if name == "" {
		s.log.Warn("etcdsource: the key is empty; ignoring it", "version", version)
		return switcher.Desired{}, false
	}
	return switcher.Desired{Engine: name, Epoch: uint64(version)}, true
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
