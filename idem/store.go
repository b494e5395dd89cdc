package idem

import (
	"context"
	"time"
)

// Store is what the gate needs of an engine: a handful of primitives over
// one client, each one round trip where the engine allows it. The gate's
// algorithm (identity, tokens, policy, timeouts, failover) is written once
// against it; RedisStore, EtcdStore and ZKStore are the adapters. A Store
// is safe for concurrent use.
//
// Keys are the hex form of an ID; a store maps them into its namespace.
// Values are opaque to the store. Errors caused by the server or the
// connection must wrap locker.ErrUnavailable, so that the gate can apply
// its policy; those of a client its owner closed wrap locker.ErrClosed
// instead (no policy lets a closed gate through); a caller's context that
// ends is returned as ctx.Err().
type Store interface {
	// Name identifies the store; in a switched gate it is the name of the
	// engine the store runs on, as the switcher's Current returns it.
	Name() string
	// Create writes val under key unless a live record is there, to live
	// ttl. retention is the longest ttl a later Replace of the record may
	// ask for (for stores that cannot change an expiry once set). It
	// returns the new entry and true, or the live entry and false.
	Create(ctx context.Context, key string, val []byte, ttl, retention time.Duration) (Entry, bool, error)
	// Replace writes val under key to live ttl, if the record is still
	// old (same value and, where the store has one, same stamp). It
	// reports whether it wrote.
	Replace(ctx context.Context, key string, old Entry, val []byte, ttl time.Duration) (bool, error)
	// Remove deletes the record if it is still old; it reports whether it
	// deleted.
	Remove(ctx context.Context, key string, old Entry) (bool, error)
	// Get returns the live record under key, and false when there is none.
	Get(ctx context.Context, key string) (Entry, bool, error)
	// Delete deletes the record under key whatever it holds, for
	// operators; it reports whether there was one.
	Delete(ctx context.Context, key string) (bool, error)
}

// Entry is one record as a store returned it.
type Entry struct {
	// Value is the record's encoded value.
	Value []byte
	// Stamp identifies this write of the record where the store has such a
	// thing (etcd: the key's mod revision; ZooKeeper: the node's
	// version); 0 elsewhere (Redis compares values).
	Stamp int64
	// TTL is how long the record has left, when the store knows it
	// cheaply (Get); 0 otherwise.
	TTL time.Duration
}
