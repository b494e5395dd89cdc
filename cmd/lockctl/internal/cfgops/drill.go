package cfgops

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"strings"
	"sync"

	gozk "github.com/go-zookeeper/zk"
	"github.com/jackc/pgx/v5"
	goredis "github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/orthrus-go/orthrus/config"
	"github.com/orthrus-go/orthrus/internal/zkconn"
)

// DrillScope is the drill-only namespace of one drill on the engines of a
// configuration: Config is what the drill opens, Remove deletes everything
// the drill left there.
type DrillScope struct {
	id   string
	orig *config.Config // the configuration asked for, prepared
	cfg  *config.Config // orig with the drill-only prefixes
	log  *slog.Logger
	// missing holds, per zk engine, the parents of its drill prefix that
	// did not exist before the drill, shallowest first.
	missing map[string][]string
}

// NewDrillScope validates cfg and id (see config.Config.ForDrill) and
// records, on every zk engine, the parents of the drill prefix that do not
// exist yet, so that Remove can take away those the drill creates. Every
// zk engine must answer within start_timeout.
func NewDrillScope(ctx context.Context, cfg *config.Config, id string, opts ...config.Option) (*DrillScope, error) {
	c, o, err := hook.Prepare(ctx, "NewDrillScope", cfg, opts)
	if err != nil {
		return nil, err
	}
	d, err := c.ForDrill(id)
	if err != nil {
		return nil, err
	}
	s := &DrillScope{id: id, orig: c, cfg: d, log: o.Log, missing: make(map[string][]string)}
	for i := range d.Engines {
		e := &d.Engines[i]
		if e.Type != config.TypeZK {
			continue
		}
		err := s.withZK(ctx, i, func(conn *zkconn.Conn) error {
			var err error
			s.missing[e.Name], err = (zkStore{conn: conn, path: e.Prefix}).missing(ctx)
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("config: engines[%d] %q (zk): %w", i, e.Name, hook.Unavailable(err))
		}
	}
	return s, nil
}

// Config returns the configuration the drill opens: cfg with the
// drill-only prefixes.
func (s *DrillScope) Config() *config.Config {
	d, _ := s.orig.ForDrill(s.id) // a fresh copy; the id was valid
	return d
}

// ID returns the drill's id.
func (s *DrillScope) ID() string { return s.id }

// Remove deletes every key and node under the drill-only prefixes, on every
// engine in parallel, each within start_timeout, and the zk parents the
// drill created when they are empty. Call it once every process of the
// drill has closed its switcher: the holds are released then. It returns
// the engines it could not clean, joined.
func (s *DrillScope) Remove(ctx context.Context) error {
	errs := make([]error, len(s.cfg.Engines))
	var wg sync.WaitGroup
	for i := range s.cfg.Engines {
		wg.Go(func() {
			e := &s.cfg.Engines[i]
			ectx, cancel := context.WithTimeout(ctx, s.cfg.StartTimeout)
			defer cancel()
			var err error
			switch e.Type {
			case config.TypeRedis:
				err = s.removeRedis(ectx, i)
			case config.TypeEtcd:
				err = s.removeEtcd(ectx, i)
			case config.TypeRedlock:
				err = s.removeRedlock(ectx, i)
			case config.TypePostgres:
				err = s.removePostgres(ectx, i)
			case config.TypeZK:
				err = s.withZK(ectx, i, func(conn *zkconn.Conn) error {
					_, err := zkconn.Do(ectx, conn, func() (struct{}, error) {
						return struct{}{}, removeTree(conn.Client(), e.Prefix, s.missing[e.Name])
					})
					return err
				})
			}
			if err != nil {
				errs[i] = fmt.Errorf("config: engines[%d] %q (%s): remove drill prefix %q: %w", i, e.Name, e.Type, e.Prefix, err)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// removeRedis deletes every key under the drill prefix of engine i, on
// every master of a Cluster.
func (s *DrillScope) removeRedis(ctx context.Context, i int) error {
	client, err := hook.RedisClient(s.cfg, i)
	if err != nil {
		return err
	}
	defer client.Close()
	pattern := globEscaper.Replace(s.cfg.Engines[i].Prefix) + ":*"
	if cc, ok := client.(*goredis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, m *goredis.Client) error { return scanDelete(ctx, m, pattern) })
	}
	return scanDelete(ctx, client, pattern)
}

// removeRedlock deletes every key under the drill prefix of engine i on
// each of its nodes, in parallel: every node holds its own copy.
func (s *DrillScope) removeRedlock(ctx context.Context, i int) error {
	nodes, closeNodes, err := hook.RedlockClients(s.cfg, i)
	if err != nil {
		return err
	}
	defer closeNodes()
	pattern := globEscaper.Replace(s.cfg.Engines[i].Prefix) + ":*"
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for k, n := range nodes {
		wg.Go(func() {
			if err := scanDelete(ctx, n, pattern); err != nil {
				errs[k] = fmt.Errorf("node %s: %w", s.cfg.Engines[i].Addrs[k], err)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

var globEscaper = strings.NewReplacer(`\`, `\\`, "*", `\*`, "?", `\?`, "[", `\[`, "]", `\]`)

func scanDelete(ctx context.Context, c goredis.Cmdable, pattern string) error {
	iter := c.Scan(ctx, 0, pattern, 500).Iterator()
	var batch []string
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		err := c.Unlink(ctx, batch...).Err()
		batch = batch[:0]
		return err
	}
	for iter.Next(ctx) {
		// One key per call: a Cluster's keys of one batch may sit in
		// different slots.
		batch = append(batch, iter.Val())
		if err := flush(); err != nil {
			return err
		}
	}
	if err := iter.Err(); err != nil {
		return err
	}
	return flush()
}

func (s *DrillScope) removeEtcd(ctx context.Context, i int) error {
	client, err := hook.EtcdClient(s.cfg, i)
	if err != nil {
		return err
	}
	defer hook.CloseEtcd(client)
	_, err = client.Delete(ctx, s.cfg.Engines[i].Prefix+"/", clientv3.WithPrefix())
	return err
}

// removePostgres drops the drill's schema, the engine's tables with it.
func (s *DrillScope) removePostgres(ctx context.Context, i int) error {
	pool, err := hook.PostgresPool(s.cfg, i)
	if err != nil {
		return err
	}
	defer pool.Close()
	_, err = pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{s.cfg.Engines[i].Prefix}.Sanitize()+" CASCADE")
	return err
}

// withZK runs fn on a ZooKeeper connection to engine i's servers,
// connected as the engine connects (credentials and TLS included).
func (s *DrillScope) withZK(ctx context.Context, i int, fn func(*zkconn.Conn) error) error {
	conf, err := hook.ZKConfig(s.cfg, i, s.log)
	if err != nil {
		return err
	}
	sctx, cancel := context.WithTimeout(ctx, s.cfg.StartTimeout)
	defer cancel()
	conn, err := zkconn.Dial(sctx, conf)
	if err != nil {
		return err
	}
	defer conn.Close()
	return fn(conn)
}

// removeTree deletes the node at p and everything under it, then the
// parents in created, deepest first, while they are empty.
func removeTree(conn *gozk.Conn, p string, created []string) error {
	var del func(string) error
	del = func(p string) error {
		children, _, err := conn.Children(p)
		if errors.Is(err, gozk.ErrNoNode) {
			return nil
		}
		if err != nil {
			return err
		}
		for _, c := range children {
			if err := del(path.Join(p, c)); err != nil {
				return err
			}
		}
		if err := conn.Delete(p, -1); err != nil && !errors.Is(err, gozk.ErrNoNode) {
			return err
		}
		return nil
	}
	if err := del(p); err != nil {
		return err
	}
	return removeEmpty(conn, created)
}

// removeEmpty deletes the nodes of created, deepest first, until one is
// not empty: in use by someone else since.
func removeEmpty(conn *gozk.Conn, created []string) error {
	for i := len(created) - 1; i >= 0; i-- {
		err := conn.Delete(created[i], -1)
		if errors.Is(err, gozk.ErrNotEmpty) {
			return nil
		}
		if err != nil && !errors.Is(err, gozk.ErrNoNode) {
			return err
		}
	}
	return nil
}
