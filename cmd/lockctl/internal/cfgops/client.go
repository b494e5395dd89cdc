package cfgops

import (
	"context"
	"errors"
	"fmt"
	"sync"

	gozk "github.com/go-zookeeper/zk"
	goredis "github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/orthrus-go/orthrus/config"
	"github.com/orthrus-go/orthrus/internal/zkconn"
	"github.com/orthrus-go/orthrus/locker"
)

// Client is the client of one configured engine's server, without the lock
// engine: for what talks to the server directly, such as the stores of
// package idem (lockctl idem is built on it). Exactly one of Redis, Etcd
// and ZK is set, by Type. Close it: nothing else closes the client.
type Client struct {
	// Name and Type are the engine's.
	Name, Type string
	// Redis is the client of a redis engine: one node, a Cluster, or a
	// master followed through its Sentinels.
	Redis goredis.UniversalClient
	// Etcd is the client of an etcd engine.
	Etcd *clientv3.Client
	// ZK is the connection of a zk engine, with a session and the
	// engine's credentials; go-zookeeper reconnects it, and adds the
	// credentials again, on its own.
	ZK *gozk.Conn
	// ZKACL is the ACL the zk engine gives its nodes, for those created
	// through ZK: all permissions to the sessions with the same credentials
	// when the engine has auth, to all otherwise.
	ZKACL []gozk.ACL
	// Down says why the server did not answer when DialClient checked it,
	// with allowDown; nil when it answered. The client connects on its own
	// when the server is back.
	Down error

	closeOnce sync.Once
	closeFn   func() error
	closeErr  error
}

// Close closes the client. It is idempotent and returns the first call's
// result.
func (c *Client) Close() error {
	c.closeOnce.Do(func() { c.closeErr = c.closeFn() })
	return c.closeErr
}

// DialClient dials the server of cfg's engine called name as config.Open
// does for the engine, with the same addresses, TLS, credentials, Sentinel
// settings and timeouts (a Redis client keeps go-redis's retries, which
// Open's engines turn off for their breakers), and checks within
// start_timeout that it answers: a Redis PING, an etcd endpoint's status,
// a ZooKeeper session. config.WithLogger sets the ZooKeeper connection's
// logger; the other options have no effect.
//
// With allowDown, a server that does not answer in time does not fail
// DialClient: the client is returned with Client.Down set, and connects
// when the server is back, as Open's engines do in a degraded start.
// Refused Redis or etcd credentials, and an etcd engine with a username
// (which authenticates while its client is built), still fail; a ZooKeeper
// session whose credentials are refused is logged and authenticated again
// later.
//
// DialClient fails, before dialling, when cfg is nil or invalid (a
// *config.ValidationError), name is not one of its engines, or the engine
// is a postgres or redlock one, which have no store of the idempotency
// gate (an error naming it and wrapping locker.ErrInvalidArgument); with an error naming
// the engine and wrapping locker.ErrUnavailable, or locker.ErrPermission
// for refused credentials, when the server does not answer; and with ctx's
// error when ctx ends first.
func DialClient(ctx context.Context, cfg *config.Config, name string, allowDown bool, opts ...config.Option) (*Client, error) {
	c, o, err := hook.Prepare(ctx, "DialClient", cfg, opts)
	if err != nil {
		return nil, err
	}
	i := engineIndex(c, name)
	if i < 0 {
		return nil, unknownEngine("DialClient: ", c, name)
	}
	e := &c.Engines[i]
	sctx, cancel := context.WithTimeout(ctx, c.StartTimeout)
	defer cancel()
	cl := &Client{Name: e.Name, Type: e.Type}
	switch e.Type {
	case config.TypeRedis:
		err = cl.dialRedis(sctx, c, i)
	case config.TypeEtcd:
		err = cl.dialEtcd(sctx, c, i)
	case config.TypeZK:
		var conf zkconn.Config
		if conf, err = hook.ZKConfig(c, i, o.Log); err == nil {
			conf.Lazy = allowDown
			err = cl.dialZK(sctx, conf)
		}
	case config.TypePostgres, config.TypeRedlock:
		err = fmt.Errorf("%w: no raw client for a %s engine: the idempotency gate stores on redis, etcd or zk", locker.ErrInvalidArgument, e.Type)
	default:
		err = fmt.Errorf("%w: unknown engine type %q", locker.ErrInvalidArgument, e.Type)
	}
	if err != nil {
		err = fmt.Errorf("config: engines[%d] %q (%s): %w", i, e.Name, e.Type, hook.Unavailable(err))
	}
	switch {
	case err == nil:
		return cl, nil
	case allowDown && cl.closeFn != nil && ctx.Err() == nil && !errors.Is(err, locker.ErrPermission) && errors.Is(err, locker.ErrUnavailable):
		cl.Down = err
		o.Log.Warn("config: DialClient: the server does not answer; the client connects when it is back", "engine", e.Name, "err", err)
		return cl, nil
	}
	if cl.closeFn != nil {
		_ = cl.closeFn()
	}
	return nil, hook.CallerOr(ctx, err)
}

// The dial functions set the client, and its close, once it is built,
// and return why it does not answer, if it does not: DialClient decides
// whether to keep it.

func (cl *Client) dialRedis(ctx context.Context, c *config.Config, i int) error {
	client, err := hook.RedisClient(c, i)
	if err != nil {
		return err
	}
	cl.Redis, cl.closeFn = client, client.Close
	if err := client.Ping(ctx).Err(); err != nil {
		if goredis.IsAuthError(err) || goredis.IsPermissionError(err) {
			return fmt.Errorf("%w: %w", locker.ErrPermission, err)
		}
		return err
	}
	return nil
}

func (cl *Client) dialEtcd(ctx context.Context, c *config.Config, i int) error {
	client, err := hook.EtcdClient(c, i)
	if err != nil {
		return err
	}
	cl.Etcd, cl.closeFn = client, func() error { return hook.CloseEtcd(client) }
	// Status needs no permission on any key: a role limited to some prefix
	// answers too. One endpoint that answers is enough.
	var errs []error
	for _, ep := range client.Endpoints() {
		if _, err := client.Status(ctx, ep); err != nil {
			errs = append(errs, err)
			continue
		}
		return nil
	}
	return hook.ExplainTLS(ctx, errors.Join(errs...), c, i)
}

// dialZK connects and waits within ctx for the session to be
// authenticated. A Lazy conf makes the connection before the wait, so that
// one whose ensemble is down exists to be kept.
func (cl *Client) dialZK(ctx context.Context, conf zkconn.Config) error {
	conn, err := zkconn.Dial(ctx, conf)
	if err != nil {
		return err
	}
	cl.ZK, cl.ZKACL, cl.closeFn = conn.Client(), conn.ACL(), conn.Close
	select {
	case <-conn.Ready():
		return nil
	case <-ctx.Done():
		return fmt.Errorf("no session: %w", ctx.Err())
	}
}
