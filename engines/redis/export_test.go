package redis

import (
	"context"

	"github.com/orthrus-go/orthrus/locker/inspect"
)

// Channel exposes the wake-up channel of a lock to the tests.
func (e *Engine) Channel(name string) string { return e.LockKey(name) + channelSuffix }

// FamilyKeys exposes the keys of a read-write lock (writer, readers,
// waiting writers, fence, waiting readers) or a semaphore (holds, count,
// fence, waiters).
func (e *Engine) FamilyKeys(kind inspect.Kind, name string) []string {
	k := e.famKeys(kind, name)
	if kind == inspect.KindPermit {
		return k[:4]
	}
	return k[:]
}

// AcquireSHA is the SHA of the acquire script of a hold of kind.
func AcquireSHA(kind inspect.Kind) string {
	switch kind {
	case inspect.KindMutex:
		return acquireScript.sha
	case inspect.KindPermit:
		return semAcquireScript.sha
	}
	return rwAcquireScript.sha
}

// Parked counts the waiters of this process on the wake-up channel of the
// mutex, read-write lock or semaphore name, once the server has confirmed
// its subscription (0 before).
func (e *Engine) Parked(kind inspect.Kind, name string) int {
	key := e.LockKey(name)
	if kind != inspect.KindMutex {
		key = e.famKeys(kind, name)[0]
	}
	h := e.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.channels[key]
	if c == nil || c.confirm == 0 {
		return 0
	}
	n := 0
	for w := c.head; w != nil; w = w.next {
		n++
	}
	return n
}

// FairAcquireSHA is the SHA of a fair engine's acquire script.
func FairAcquireSHA() string { return fairAcquireScript.sha }

// QueueKeys are the keys of a fair engine's queue of name: the queue and
// the expiries of its places.
func (e *Engine) QueueKeys(name string) []string {
	k := fairKeys(e.LockKey(name))
	return k[1:]
}

// Subscribers counts the subscribers of name's wake-up channel.
func (e *Engine) Subscribers(ctx context.Context, name string) (int, error) {
	return e.subscribers(ctx, e.LockKey(name)+channelSuffix)
}

// RenewSHA is the SHA of the script that renews a chunk of holds.
func RenewSHA() string { return renewScript.sha }

// MaxRenew and Split expose how a chunk of holds is cut into renewal calls.
const MaxRenew = maxRenew

var Split = split

// RankBand is the span of the ranks of one weight in a queue.
const RankBand = band
