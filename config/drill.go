package config

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"regexp"
	"strings"
	"sync"

	gozk "github.com/go-zookeeper/zk"
	goredis "github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/orthrus-go/orthrus/engines/zk"
	"github.com/orthrus-go/orthrus/internal/zkconn"
	"github.com/orthrus-go/orthrus/locker"
)

// drillMark is what a drill-only prefix adds to the engine's prefix.
const drillMark = "-lockctl-drill-"

var drillID = regexp.MustCompile(`^[a-z0-9]{1,32}$`)

// enginePrefix returns the engine's prefix, or its type's default.
func enginePrefix(e *Engine) string {
	switch {
	case e.Prefix != "" && e.Type == TypeZK:
		return ensureSlash(strings.TrimSuffix(e.Prefix, "/"))
	case e.Prefix != "":
		return e.Prefix
	case e.Type == TypeZK:
		return zk.DefaultPrefix
	}
	return "orthrus" // the redis and etcd engines' default
}

// DrillPrefix returns the prefix that a drill identified by id uses on e
// instead of e's own: a sibling of it, "<prefix>-lockctl-drill-<id>", so
// that the drill's keys and nodes never mix with the application's (none
// of the application's key ranges or nodes contains them) and can all be
// removed, while prefix-based permissions (Redis ACL key patterns, etcd
// RBAC prefixes) that cover "<prefix>*" still allow them.
func DrillPrefix(e Engine, id string) string { return enginePrefix(&e) + drillMark + id }

// ForDrill returns a copy of c whose engines keep their keys and nodes
// under the drill-only prefixes of id (DrillPrefix). id is 1 to 32
// lower-case letters and digits.
func (c *Config) ForDrill(id string) (*Config, error) {
	if !drillID.MatchString(id) {
		return nil, fmt.Errorf("config: ForDrill: %w: drill id %q: want 1 to 32 lower-case letters and digits", locker.ErrInvalidArgument, id)
	}
	d := c.clone()
	d.drill = id
	for i := range d.Engines {
		d.Engines[i].Prefix = DrillPrefix(d.Engines[i], id)
	}
	return d, nil
}

// DrillScope is the drill-only namespace of one drill on the engines of a
// configuration: Config is what the drill opens, Remove deletes everything
// the drill left there.
type DrillScope struct {
	id   string
	orig *Config
	cfg  *Config
	log  *slog.Logger
	// missing holds, per zk engine, the parents of its drill prefix that
	// did not exist before the drill, shallowest first.
	missing map[string][]string
}

// NewDrillScope validates cfg and id and records, on every zk engine, the
// parents of the drill prefix that do not exist yet, so that Remove can
// take away those the drill creates. Every zk engine must answer within
// start_timeout.
func NewDrillScope(ctx context.Context, cfg *Config, id string, opts ...Option) (*DrillScope, error) {
	c, o, err := prepare(ctx, "NewDrillScope", cfg, opts)
	if err != nil {
		return nil, err
	}
	d, err := c.ForDrill(id)
	if err != nil {
		return nil, err
	}
	s := &DrillScope{id: id, orig: c, cfg: d, log: o.logger, missing: make(map[string][]string)}
	for i := range d.Engines {
		e := &d.Engines[i]
		if e.Type != TypeZK {
			continue
		}
		err := s.withZK(ctx, e, fmt.Sprintf("engines[%d]", i), func(conn *zkconn.Conn) error {
			var err error
			s.missing[e.Name], err = (zkStore{conn: conn, path: e.Prefix}).missing(ctx)
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("config: engines[%d] %q (zk): %w", i, e.Name, unavailable(err))
		}
	}
	return s, nil
}

// Config returns the configuration the drill opens: cfg with the
// drill-only prefixes.
func (s *DrillScope) Config() *Config { return s.cfg.clone() }

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
			case TypeRedis:
				err = s.removeRedis(ectx, e, fmt.Sprintf("engines[%d]", i))
			case TypeEtcd:
				err = s.removeEtcd(ectx, e, fmt.Sprintf("engines[%d]", i))
			case TypeZK:
				err = s.withZK(ectx, e, fmt.Sprintf("engines[%d]", i), func(conn *zkconn.Conn) error {
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

// redisClient returns a client for a redis engine, as Open dials it but
// with go-redis's retries.
func redisClient(e *Engine, field string) (goredis.UniversalClient, error) {
	o, err := redisOptions(e, field)
	if err != nil {
		return nil, err
	}
	return goredis.NewUniversalClient(o), nil
}

// removeRedis deletes every key under the drill prefix, on every master of
// a Cluster.
func (s *DrillScope) removeRedis(ctx context.Context, e *Engine, field string) error {
	client, err := redisClient(e, field)
	if err != nil {
		return err
	}
	defer client.Close()
	pattern := globEscaper.Replace(e.Prefix) + ":*"
	if cc, ok := client.(*goredis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, m *goredis.Client) error { return scanDelete(ctx, m, pattern) })
	}
	return scanDelete(ctx, client, pattern)
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

func (s *DrillScope) removeEtcd(ctx context.Context, e *Engine, field string) error {
	client, err := engineEtcdClient(e, field, s.cfg.StartTimeout)
	if err != nil {
		return err
	}
	defer closeEtcd(client)
	_, err = client.Delete(ctx, e.Prefix+"/", clientv3.WithPrefix())
	return err
}

// withZK runs fn on a ZooKeeper connection to e's servers, connected as
// the engine connects (credentials and TLS included).
func (s *DrillScope) withZK(ctx context.Context, e *Engine, field string, fn func(*zkconn.Conn) error) error {
	conf, err := zkEngineConn(e, field, s.log)
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
