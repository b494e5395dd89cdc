package config

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	gozk "github.com/go-zookeeper/zk"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/orthrus-go/orthrus/internal/confighook"
	"github.com/orthrus-go/orthrus/internal/zkconn"
	"github.com/orthrus-go/orthrus/switcher/etcdsource"
	"github.com/orthrus-go/orthrus/switcher/zksource"
)

// readRaw returns the etcd key's or zk node's value, nil when it does not
// exist.
func readRaw(ctx context.Context, h *confighook.Source) ([]byte, error) {
	data, _, _, err := h.Get(ctx)
	if err != nil {
		noun := map[string]string{SourceEtcd: "etcd key", SourceZK: "zk node"}[h.Kind]
		return nil, fmt.Errorf("config: source: %s %q: %w", noun, h.Where, unavailable(err))
	}
	return data, nil
}

// dialSource connects to the source of c, for Open and lockctl's
// DialSource; ctx bounds the zk handshake.
func dialSource(ctx context.Context, c *Config, log *slog.Logger) (*confighook.Source, error) {
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
		return &confighook.Source{Kind: SourceFile, Where: c.file, Switcher: src, Get: fileGet(c.file), Close: src.close}, nil

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
		return &confighook.Source{Kind: SourceEtcd, Where: s.Key, Switcher: src, Get: etcdGet(client, s.Key), Etcd: client, Close: closeClient}, nil

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
		return &confighook.Source{Kind: SourceZK, Where: s.Path, Switcher: src, Get: zkGet(conn, s.Path), ZK: conn, Close: conn.Close}, nil

	default:
		return nil, &ValidationError{Fields: []*FieldError{{Field: "source.type",
			Msg: fmt.Sprintf("%q: no source to dial (want file, etcd or zk)", s.Type)}}}
	}
}

// fileGet reads the configuration file itself, its links followed.
func fileGet(path string) func(context.Context) ([]byte, bool, uint64, error) {
	return func(context.Context) ([]byte, bool, uint64, error) {
		real, err := filepath.EvalSymlinks(path)
		if err != nil {
			return nil, false, 0, err
		}
		data, err := os.ReadFile(real)
		return data, err == nil, 0, err
	}
}

// writeFile replaces the configuration file at path with data, as
// setActive replaces it, starting over when it changes meanwhile.
func writeFile(path string, data []byte) error {
	real, err := filepath.EvalSymlinks(path)
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

// etcdGet reads the etcd key of source.type etcd; its version is the
// epoch etcdsource takes from it.
func etcdGet(client *clientv3.Client, key string) func(context.Context) ([]byte, bool, uint64, error) {
	return func(ctx context.Context) ([]byte, bool, uint64, error) {
		resp, err := client.Get(ctx, key)
		if err != nil {
			return nil, false, 0, err
		}
		if len(resp.Kvs) == 0 {
			return nil, false, 0, nil
		}
		return resp.Kvs[0].Value, true, uint64(resp.Kvs[0].Version), nil
	}
}

// zkGet reads the ZooKeeper node of source.type zk.
func zkGet(conn *zkconn.Conn, path string) func(context.Context) ([]byte, bool, uint64, error) {
	return func(ctx context.Context) ([]byte, bool, uint64, error) {
		type got struct {
			data []byte
			st   *gozk.Stat
		}
		r, err := zkconn.Do(ctx, conn, func() (got, error) {
			data, st, err := conn.Client().Get(path)
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
}
