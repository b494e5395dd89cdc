package cfgops

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	gozk "github.com/go-zookeeper/zk"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/orthrus-go/orthrus/config"
	"github.com/orthrus-go/orthrus/internal/confighook"
	"github.com/orthrus-go/orthrus/internal/zkconn"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/switcher"
)

// SourceHandle is the configured source dialled on its own, without
// engines or a switcher: for operator tools that write it (lockctl
// switch), read it (lockctl status) or must put it back as it was (a
// drill). Close it.
type SourceHandle struct {
	src   *confighook.Source
	store sourceStore

	closeOnce sync.Once
	closeErr  error
}

// SourceValue is what a source names.
type SourceValue struct {
	// Engine is the value, trimmed; "" when the key or node does not exist
	// or is empty.
	Engine string
	// Exists is false when the etcd key or zk node does not exist.
	Exists bool
	// Epoch is the switch epoch that the switchers watching the source take
	// from it: the etcd key's version, the zk node's version + 1; 0 for a
	// file.
	Epoch uint64
}

// SourceSnapshot is the raw state of a source, for Restore.
type SourceSnapshot struct {
	data    []byte
	exists  bool
	missing []string // zk: ancestors of the node that did not exist, deepest last
}

// sourceStore writes the raw value of one kind of source; config reads it.
type sourceStore interface {
	put(ctx context.Context, data []byte) error
	remove(ctx context.Context, parents []string) error
	missing(ctx context.Context) ([]string, error)
}

// DialSource connects to the source of cfg (source.type file, etcd or zk)
// within start_timeout. It fails with a *config.ValidationError naming
// source.type when there is none, and with an error wrapping
// locker.ErrUnavailable when the etcd or ZooKeeper servers do not answer.
func DialSource(ctx context.Context, cfg *config.Config, opts ...config.Option) (*SourceHandle, error) {
	c, o, err := hook.Prepare(ctx, "DialSource", cfg, opts)
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithTimeout(ctx, c.StartTimeout)
	defer cancel()
	src, err := hook.DialSource(sctx, c, o.Log)
	if err != nil {
		return nil, hook.CallerOr(ctx, err)
	}
	h := &SourceHandle{src: src}
	switch src.Kind {
	case config.SourceFile:
		h.store = fileStore{src.Where}
	case config.SourceEtcd:
		h.store = etcdStore{src.Etcd, src.Where}
		// The etcd client connects lazily: does it answer at all?
		if _, _, _, err := src.Get(sctx); err != nil {
			_ = src.Close()
			return nil, hook.CallerOr(ctx, fmt.Errorf("config: source: etcd key %q: %w", src.Where, hook.Unavailable(err)))
		}
	case config.SourceZK:
		h.store = zkStore{src.ZK, src.Where}
	}
	return h, nil
}

// Kind returns the source's type: file, etcd or zk.
func (h *SourceHandle) Kind() string { return h.src.Kind }

// Where returns the file's path, the etcd key or the zk node's path.
func (h *SourceHandle) Where() string { return h.src.Where }

// Source returns the source as the switcher uses it. It implements
// switcher.Setter; a shared source may also implement switcher.Roster.
func (h *SourceHandle) Source() switcher.Source { return h.src.Switcher }

// failed names the source in err, a failure to reach it.
func (h *SourceHandle) failed(what string, err error) error {
	return fmt.Errorf("config: %s %s %q: %w", what, h.src.Kind, h.src.Where, hook.Unavailable(err))
}

// Read returns what the source names now. For a file it is the active
// engine the file gives, with the environment overrides applied, as the
// processes watching it see it.
func (h *SourceHandle) Read(ctx context.Context) (SourceValue, error) {
	if h.src.Kind == config.SourceFile {
		c, err := config.Load(h.src.Where)
		if err != nil {
			return SourceValue{}, err
		}
		return SourceValue{Engine: c.Active, Exists: true}, nil
	}
	data, exists, version, err := h.src.Get(ctx)
	if err != nil {
		return SourceValue{}, h.failed("source", err)
	}
	return SourceValue{Engine: strings.TrimSpace(string(data)), Exists: exists, Epoch: version}, nil
}

// Snapshot records the source's raw content, for Restore.
func (h *SourceHandle) Snapshot(ctx context.Context) (*SourceSnapshot, error) {
	data, exists, _, err := h.src.Get(ctx)
	if err != nil {
		return nil, h.failed("source", err)
	}
	snap := &SourceSnapshot{data: data, exists: exists}
	if !exists {
		if snap.missing, err = h.store.missing(ctx); err != nil {
			return nil, h.failed("source", err)
		}
	}
	return snap, nil
}

// Restore puts the source back as snap recorded it, byte for byte: the
// file's content, the key's or node's value, or its absence (and, for a
// node, the parents it did not have, when they are empty). It reports
// whether anything had to change. An etcd key's or zk node's version still
// moves on: the switchers watching it see one more change.
func (h *SourceHandle) Restore(ctx context.Context, snap *SourceSnapshot) (bool, error) {
	if snap == nil {
		return false, fmt.Errorf("config: Restore: %w: snapshot is nil", locker.ErrInvalidArgument)
	}
	data, exists, _, err := h.src.Get(ctx)
	if err != nil {
		return false, h.failed("restore source", err)
	}
	switch {
	case exists == snap.exists && bytes.Equal(data, snap.data):
		return false, nil
	case !snap.exists:
		err = h.store.remove(ctx, snap.missing)
	default:
		err = h.store.put(ctx, snap.data)
	}
	if err != nil {
		return false, fmt.Errorf("config: restore source %s %q: %w", h.src.Kind, h.src.Where, err)
	}
	return true, nil
}

// Close closes the connection DialSource made. It is idempotent.
func (h *SourceHandle) Close() error {
	h.closeOnce.Do(func() { h.closeErr = h.src.Close() })
	return h.closeErr
}

// fileStore is the configuration file itself.
type fileStore struct{ path string }

func (f fileStore) put(_ context.Context, data []byte) error { return hook.WriteFile(f.path, data) }

func (f fileStore) remove(context.Context, []string) error {
	return errors.New("the configuration file is gone; it cannot be restored")
}

func (fileStore) missing(context.Context) ([]string, error) { return nil, nil }

// etcdStore is the etcd key of source.type etcd.
type etcdStore struct {
	client *clientv3.Client
	key    string
}

func (e etcdStore) put(ctx context.Context, data []byte) error {
	_, err := e.client.Put(ctx, e.key, string(data))
	return err
}

func (e etcdStore) remove(ctx context.Context, _ []string) error {
	_, err := e.client.Delete(ctx, e.key)
	return err
}

func (etcdStore) missing(context.Context) ([]string, error) { return nil, nil }

// zkStore is the ZooKeeper node of source.type zk.
type zkStore struct {
	conn *zkconn.Conn
	path string
}

func (z zkStore) put(ctx context.Context, data []byte) error {
	_, err := zkconn.Do(ctx, z.conn, func() (struct{}, error) {
		_, err := z.conn.Client().Set(z.path, data, -1)
		if errors.Is(err, gozk.ErrNoNode) {
			_, err = z.conn.Client().Create(z.path, data, 0, z.conn.ACL())
		}
		return struct{}{}, err
	})
	return err
}

// remove deletes the node, then the parents that did not exist before,
// deepest first, while they are empty.
func (z zkStore) remove(ctx context.Context, parents []string) error {
	_, err := zkconn.Do(ctx, z.conn, func() (struct{}, error) {
		if err := z.conn.Client().Delete(z.path, -1); err != nil && !errors.Is(err, gozk.ErrNoNode) {
			return struct{}{}, err
		}
		return struct{}{}, removeEmpty(z.conn.Client(), parents)
	})
	return err
}

// missing returns the node's ancestors that do not exist, shallowest first.
func (z zkStore) missing(ctx context.Context) ([]string, error) {
	return zkconn.Do(ctx, z.conn, func() ([]string, error) {
		var out []string
		for _, p := range zkconn.Ancestors(z.path) {
			ok, _, err := z.conn.Client().Exists(p)
			if err != nil {
				return nil, err
			}
			if !ok {
				out = append(out, p)
			}
		}
		return out, nil
	})
}
