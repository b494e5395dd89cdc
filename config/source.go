package config

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"

	gozk "github.com/go-zookeeper/zk"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/orthrus-go/orthrus/internal/zkconn"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/switcher"
	"github.com/orthrus-go/orthrus/switcher/etcdsource"
	"github.com/orthrus-go/orthrus/switcher/zksource"
)

// SourceHandle is the configured source dialled on its own, without
// engines or a switcher: for operator tools that write it (lockctl
// switch), read it (lockctl status) or must put it back as it was (a
// drill). Close it.
type SourceHandle struct {
	kind, where string
	src         switcher.Source
	store       sourceStore

	closeOnce sync.Once
	closeFn   func() error
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

// sourceStore is the raw value of one kind of source.
type sourceStore interface {
	get(ctx context.Context) (data []byte, exists bool, version uint64, err error)
	put(ctx context.Context, data []byte) error
	remove(ctx context.Context, parents []string) error
	missing(ctx context.Context) ([]string, error)
}

// DialSource connects to the source of cfg (source.type file, etcd or zk)
// within start_timeout. It fails with a *ValidationError naming source.type
// when there is none, and with an error wrapping locker.ErrUnavailable
// when the etcd or ZooKeeper servers do not answer.
func DialSource(ctx context.Context, cfg *Config, opts ...Option) (*SourceHandle, error) {
	c, o, err := prepare(ctx, "DialSource", cfg, opts)
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithTimeout(ctx, c.StartTimeout)
	defer cancel()
	h, err := dialSource(sctx, c, o.logger)
	if err != nil {
		return nil, callerOr(ctx, err)
	}
	if h.kind == SourceEtcd {
		// zkConn waited for a session; the etcd client connects lazily.
		if _, err := h.readRaw(sctx); err != nil { // answers at all?
			_ = h.closeFn()
			return nil, callerOr(ctx, err)
		}
	}
	return h, nil
}

// readRaw returns the etcd key's or zk node's value, nil when it does not
// exist.
func (h *SourceHandle) readRaw(ctx context.Context) ([]byte, error) {
	data, _, _, err := h.store.get(ctx)
	if err != nil {
		noun := map[string]string{SourceEtcd: "etcd key", SourceZK: "zk node"}[h.kind]
		return nil, fmt.Errorf("config: source: %s %q: %w", noun, h.where, unavailable(err))
	}
	return data, nil
}

// dialSource connects to the source of c, for DialSource and Open; ctx
// bounds the zk handshake.
func dialSource(ctx context.Context, c *Config, log *slog.Logger) (*SourceHandle, error) {
	switch s := &c.Source; s.Type {
	case SourceFile:
		if c.file == "" {
			return nil, &ValidationError{Fields: []*FieldError{{Field: "source.type",
				Msg: `"file" is the file the configuration was loaded from: use a Config from Load`}}}
		}
		src, err := newFileSource(c, log)
		if err != nil {
			return nil, err
		}
		return &SourceHandle{kind: SourceFile, where: c.file, src: src, store: fileStore{c.file}, closeFn: src.close}, nil

	case SourceEtcd:
		client, err := etcdClient(s.Endpoints, s.Username, s.Password, &s.TLS, "source", orDefault(s.DialTimeout, c.StartTimeout))
		if err != nil {
			return nil, fmt.Errorf("config: source: %w", unavailable(err))
		}
		closeClient := func() error { return closeEtcd(client) }
		src, err := etcdsource.New(client, s.Key, etcdsource.WithLogger(log))
		if err != nil {
			_ = closeClient()
			return nil, fmt.Errorf("config: source: %w", err)
		}
		return &SourceHandle{kind: SourceEtcd, where: s.Key, src: src, store: etcdStore{client, s.Key}, closeFn: closeClient}, nil

	case SourceZK:
		conn, err := zkConn(ctx, s, c.StartTimeout, log)
		if err != nil {
			return nil, fmt.Errorf("config: source: zk %q: %w", s.Servers, unavailable(err))
		}
		src, err := zksource.New(conn.Client(), s.Path, zksource.WithLogger(log), zksource.WithACL(conn.ACL()))
		if err != nil {
			_ = conn.Close()
			return nil, fmt.Errorf("config: source: %w", err)
		}
		return &SourceHandle{kind: SourceZK, where: s.Path, src: src, store: zkStore{conn, s.Path}, closeFn: conn.Close}, nil

	default:
		return nil, &ValidationError{Fields: []*FieldError{{Field: "source.type",
			Msg: fmt.Sprintf("%q: no source to dial (want file, etcd or zk)", s.Type)}}}
	}
}

// Kind returns the source's type: file, etcd or zk.
func (h *SourceHandle) Kind() string { return h.kind }

// Where returns the file's path, the etcd key or the zk node's path.
func (h *SourceHandle) Where() string { return h.where }

// Source returns the source as the switcher uses it. It implements
// switcher.Setter; a shared source may also implement switcher.Roster.
func (h *SourceHandle) Source() switcher.Source { return h.src }

// Read returns what the source names now. For a file it is the active
// engine the file gives, with the environment overrides applied, as the
// processes watching it see it.
func (h *SourceHandle) Read(ctx context.Context) (SourceValue, error) {
	if h.kind == SourceFile {
		c, err := load(h.where)
		if err != nil {
			return SourceValue{}, err
		}
		return SourceValue{Engine: c.Active, Exists: true}, nil
	}
	data, exists, version, err := h.store.get(ctx)
	if err != nil {
		return SourceValue{}, fmt.Errorf("config: source %s %q: %w", h.kind, h.where, unavailable(err))
	}
	return SourceValue{Engine: strings.TrimSpace(string(data)), Exists: exists, Epoch: version}, nil
}

// Snapshot records the source's raw content, for Restore.
func (h *SourceHandle) Snapshot(ctx context.Context) (*SourceSnapshot, error) {
	data, exists, _, err := h.store.get(ctx)
	if err != nil {
		return nil, fmt.Errorf("config: source %s %q: %w", h.kind, h.where, unavailable(err))
	}
	snap := &SourceSnapshot{data: data, exists: exists}
	if !exists {
		if snap.missing, err = h.store.missing(ctx); err != nil {
			return nil, fmt.Errorf("config: source %s %q: %w", h.kind, h.where, unavailable(err))
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
	data, exists, _, err := h.store.get(ctx)
	if err != nil {
		return false, fmt.Errorf("config: restore source %s %q: %w", h.kind, h.where, unavailable(err))
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
		return false, fmt.Errorf("config: restore source %s %q: %w", h.kind, h.where, err)
	}
	return true, nil
}

// Close closes the connection DialSource made. It is idempotent.
func (h *SourceHandle) Close() error {
	h.closeOnce.Do(func() { h.closeErr = h.closeFn() })
	return h.closeErr
}

// fileStore is the configuration file itself.
type fileStore struct{ path string }

func (f fileStore) get(context.Context) ([]byte, bool, uint64, error) {
	real, err := filepath.EvalSymlinks(f.path)
	if err != nil {
		return nil, false, 0, err
	}
	data, err := os.ReadFile(real)
	return data, err == nil, 0, err
}

func (f fileStore) put(_ context.Context, data []byte) error {
	real, err := filepath.EvalSymlinks(f.path)
	if err != nil {
		return err
	}
	for range setAttempts {
		now, err := os.ReadFile(real)
		if err != nil {
			return err
		}
		if err := replaceFile(real, now, data); !errors.Is(err, errChanged) {
			return err
		}
	}
	return fmt.Errorf("%s kept changing while being written; try again", real)
}

func (f fileStore) remove(context.Context, []string) error {
	return errors.New("the configuration file is gone; it cannot be restored")
}

func (fileStore) missing(context.Context) ([]string, error) { return nil, nil }

// etcdStore is the etcd key of source.type etcd.
type etcdStore struct {
	client *clientv3.Client
	key    string
}

func (e etcdStore) get(ctx context.Context) ([]byte, bool, uint64, error) {
	resp, err := e.client.Get(ctx, e.key)
	if err != nil {
		return nil, false, 0, err
	}
	if len(resp.Kvs) == 0 {
		return nil, false, 0, nil
	}
	return resp.Kvs[0].Value, true, uint64(resp.Kvs[0].Version), nil
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

func (z zkStore) get(ctx context.Context) ([]byte, bool, uint64, error) {
	type got struct {
		data []byte
		st   *gozk.Stat
	}
	r, err := zkconn.Do(ctx, z.conn, func() (got, error) {
		data, st, err := z.conn.Client().Get(z.path)
		return got{data, st}, err
	})
	if errors.Is(err, gozk.ErrNoNode) {
		return nil, false, 0, nil
	}
	if err != nil {
		return nil, false, 0, err
	}
	// zksource's epoch: versions start at 0, epochs at 1.
	return r.data, true, uint64(r.st.Version) + 1, nil
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
