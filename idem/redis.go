package idem

import (
	"context"
	"errors"
	"fmt"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/orthrus-go/orthrus/locker"
)

// Scripts of the Redis store: each checks that the record still holds the
// attempt's value before it writes, in one round trip.
var (
	redisReplace = goredis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return 1
end
return 0`)
	redisRemove = goredis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0`)
	// Their SHA-1s, boxed once: EVALSHA's arguments are built in one slice.
	replaceSHA, removeSHA any = redisReplace.Hash(), redisRemove.Hash()
)

// RedisStore keeps records as Redis strings with a TTL, through go-redis
// (single node, Sentinel or Cluster: one key per record). Begin is one SET
// NX PX (and a GET for a duplicate), Done one Lua script that compares the
// value and then rewrites or deletes.
type RedisStore struct {
	client goredis.UniversalClient
	name   string
	prefix string
}

var _ Store = (*RedisStore)(nil)

// StoreOption configures a store of this package. A bad value makes the
// constructor fail with an error wrapping locker.ErrInvalidArgument that
// names the option.
type StoreOption func(*storeSettings) error

type storeSettings struct {
	name, prefix string
	noTTLNodes   bool
}

// WithName names the store; a switched gate picks stores by the engine
// names the switcher reports, so give each store its engine's name.
// Default: "redis", "etcd" or "zk".
func WithName(name string) StoreOption {
	return func(s *storeSettings) error {
		if name == "" {
			return fmt.Errorf("%w: WithName: name is empty", locker.ErrInvalidArgument)
		}
		s.name = name
		return nil
	}
}

// WithPrefix sets the namespace of the store's keys (Redis, etcd) or its
// parent node (ZooKeeper, an absolute path). Default: "orthrus:idem" for
// Redis, "orthrus/idem/" for etcd, "/orthrus/idem" for ZooKeeper.
func WithPrefix(prefix string) StoreOption {
	return func(s *storeSettings) error {
		if prefix == "" {
			return fmt.Errorf("%w: WithPrefix: prefix is empty", locker.ErrInvalidArgument)
		}
		s.prefix = prefix
		return nil
	}
}

func resolveStore(opts []StoreOption, name, prefix string) (storeSettings, error) {
	s := storeSettings{name: name, prefix: prefix}
	err := apply(&s, opts, "nil StoreOption")
	return s, err
}

// NewRedisStore returns a store over client, which it never closes. Set
// ContextTimeoutEnabled on the client so that a paused server fails a call
// at the gate's request timeout rather than at the client's read timeout.
func NewRedisStore(client goredis.UniversalClient, opts ...StoreOption) (*RedisStore, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: NewRedisStore: client is nil", locker.ErrInvalidArgument)
	}
	s, err := resolveStore(opts, "redis", "orthrus:idem")
	if err != nil {
		return nil, err
	}
	if s.noTTLNodes {
		return nil, fmt.Errorf("%w: WithoutTTLNodes applies to ZooKeeper only", locker.ErrInvalidArgument)
	}
	return &RedisStore{client: client, name: s.name, prefix: s.prefix + ":"}, nil
}

// Name implements Store.
func (r *RedisStore) Name() string { return r.name }

// Key returns the Redis key of the record with the given ID.
func (r *RedisStore) Key(id ID) string { return r.prefix + id.String() }

func (r *RedisStore) fail(op, key string, err error) error {
	switch {
	case errors.Is(err, context.Canceled):
		return err
	case errors.Is(err, goredis.ErrClosed):
		// The owner closed the client: not an outage to ride out.
		return fmt.Errorf("redis: %s %s: %w: %w", op, key, locker.ErrClosed, err)
	}
	return fmt.Errorf("redis: %s %s: %w: %w", op, key, locker.ErrUnavailable, err)
}

// redisAttempts bounds the retries of a Begin whose SET NX found a record
// that was gone by the time it read it.
const redisAttempts = 4

// Create implements Store with SET key val PX ttl NX, the bare recipe's
// one round trip; only a duplicate reads the live record with a GET.
// (SET NX GET would read it in the same round trip, at a cost to every
// Begin: duplicates are the rarer case.)
func (r *RedisStore) Create(ctx context.Context, key string, val []byte, ttl, _ time.Duration) (Entry, bool, error) {
	k := r.prefix + key
	for range redisAttempts {
		ok, err := r.client.SetNX(ctx, k, val, ttl).Result()
		if err != nil {
			return Entry{}, false, r.fail("create", k, err)
		}
		if ok {
			return Entry{Value: val}, true, nil
		}
		cur, err := r.client.Get(ctx, k).Bytes()
		switch {
		case err == goredis.Nil:
			continue // gone meanwhile (a failure, an expiry): try again
		case err != nil:
			return Entry{}, false, r.fail("read", k, err)
		}
		return Entry{Value: cur}, false, nil
	}
	return Entry{}, false, r.fail("create", k, fmt.Errorf("still racing other attempts after %d tries", redisAttempts))
}

// Replace implements Store.
func (r *RedisStore) Replace(ctx context.Context, key string, old Entry, val []byte, ttl time.Duration) (bool, error) {
	k := r.prefix + key
	n, err := r.eval(ctx, redisReplace, goredis.NewCmd(ctx, "evalsha", replaceSHA, 1, k, old.Value, val, ttl.Milliseconds()))
	if err != nil {
		return false, r.fail("replace", k, err)
	}
	return n == 1, nil
}

// Remove implements Store.
func (r *RedisStore) Remove(ctx context.Context, key string, old Entry) (bool, error) {
	k := r.prefix + key
	n, err := r.eval(ctx, redisRemove, goredis.NewCmd(ctx, "evalsha", removeSHA, 1, k, old.Value))
	if err != nil {
		return false, r.fail("remove", k, err)
	}
	return n == 1, nil
}

// eval runs cmd, the EVALSHA of script s with one key, built in one
// argument list (Script.Run would copy its arguments into another); a
// server that does not have the script (restarted, flushed) gets it with
// EVAL.
func (r *RedisStore) eval(ctx context.Context, s *goredis.Script, cmd *goredis.Cmd) (int64, error) {
	_ = r.client.Process(ctx, cmd)
	if err := cmd.Err(); err != nil && goredis.HasErrorPrefix(err, "NOSCRIPT") {
		args := cmd.Args()
		cmd = s.Eval(ctx, r.client, []string{args[3].(string)}, args[4:]...)
	}
	return cmd.Int64()
}

// Get implements Store, with the record's remaining TTL, in one pipeline.
func (r *RedisStore) Get(ctx context.Context, key string) (Entry, bool, error) {
	k := r.prefix + key
	var get *goredis.StringCmd
	var ttl *goredis.DurationCmd
	_, err := r.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
		get = p.Get(ctx, k)
		ttl = p.PTTL(ctx, k)
		return nil
	})
	switch {
	case errors.Is(err, goredis.Nil) || errors.Is(get.Err(), goredis.Nil):
		return Entry{}, false, nil
	case err != nil:
		return Entry{}, false, r.fail("get", k, err)
	}
	return Entry{Value: []byte(get.Val()), TTL: max(ttl.Val(), 0)}, true, nil
}

// Delete implements Store.
func (r *RedisStore) Delete(ctx context.Context, key string) (bool, error) {
	k := r.prefix + key
	n, err := r.client.Del(ctx, k).Result()
	if err != nil {
		return false, r.fail("delete", k, err)
	}
	return n == 1, nil
}
