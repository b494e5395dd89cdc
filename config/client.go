package config

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	gozk "github.com/go-zookeeper/zk"
	goredis "github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

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

// DialClient dials the server of cfg's engine called name as Open does for
// the engine, with the same addresses, TLS, credentials, Sentinel settings
// and timeouts (a Redis client keeps go-redis's retries, which Open's
// engines turn off for their breakers), and checks within start_timeout
// that it answers: a Redis PING, an etcd endpoint's status, a ZooKeeper
// session. WithLogger sets the ZooKeeper connection's logger; the other
// options have no effect.
//
// DialClient fails, before dialling, when cfg is nil or invalid (a
// *ValidationError) or name is not one of its engines (an error naming it
// and wrapping locker.ErrInvalidArgument); with an error naming the engine
// and wrapping locker.ErrUnavailable, or locker.ErrPermission for refused
// credentials, when the server does not answer; and with ctx's error when
// ctx ends first.
func DialClient(ctx context.Context, cfg *Config, name string, opts ...Option) (*Client, error) {
	c, o, err := prepare(ctx, "DialClient", cfg, opts)
	if err != nil {
		return nil, err
	}
	i := c.engineIndex(name)
	if i < 0 {
		return nil, fmt.Errorf("config: DialClient: %w: unknown engine %q (want one of %s)", locker.ErrInvalidArgument, name, quoteAll(c.engineNames()))
	}
	e := &c.Engines[i]
	field := fmt.Sprintf("engines[%d]", i)
	sctx, cancel := context.WithTimeout(ctx, c.StartTimeout)
	defer cancel()
	cl := &Client{Name: e.Name, Type: e.Type}
	switch e.Type {
	case TypeRedis:
		err = cl.dialRedis(sctx, e, field)
	case TypeEtcd:
		err = cl.dialEtcd(sctx, e, field, c.StartTimeout)
	case TypeZK:
		var conf zkconn.Config
		if conf, err = zkEngineConn(e, field, o.logger); err == nil {
			err = cl.dialZK(sctx, conf)
		}
	default:
		err = fmt.Errorf("%w: unknown engine type %q", locker.ErrInvalidArgument, e.Type)
	}
	if err != nil {
		return nil, callerOr(ctx, fmt.Errorf("config: %s %q (%s): %w", field, e.Name, e.Type, unavailable(err)))
	}
	return cl, nil
}

func (cl *Client) dialRedis(ctx context.Context, e *Engine, field string) error {
	client, err := redisClient(e, field)
	if err != nil {
		return err
	}
	if err := client.Ping(ctx).Err(); err != nil {
		_ = client.Close()
		if goredis.IsAuthError(err) || goredis.IsPermissionError(err) {
			return fmt.Errorf("%w: %w", locker.ErrPermission, err)
		}
		return err
	}
	cl.Redis, cl.closeFn = client, client.Close
	return nil
}

func (cl *Client) dialEtcd(ctx context.Context, e *Engine, field string, startTimeout time.Duration) error {
	client, err := engineEtcdClient(e, field, startTimeout)
	if err != nil {
		return err
	}
	// Status needs no permission on any key: a role limited to some prefix
	// answers too. One endpoint that answers is enough.
	var errs []error
	for _, ep := range client.Endpoints() {
		if _, err := client.Status(ctx, ep); err != nil {
			errs = append(errs, err)
			continue
		}
		cl.Etcd, cl.closeFn = client, func() error { return closeEtcd(client) }
		return nil
	}
	_ = closeEtcd(client)
	return explainTLS(ctx, errors.Join(errs...), e.Endpoints, &e.TLS, field+".tls")
}

func (cl *Client) dialZK(ctx context.Context, conf zkconn.Config) error {
	conn, err := zkconn.Dial(ctx, conf)
	if err != nil {
		return err
	}
	cl.ZK, cl.ZKACL, cl.closeFn = conn.Client(), conn.ACL(), conn.Close
	return nil
}
