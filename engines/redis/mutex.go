package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	goredis "github.com/redis/go-redis/v9"

	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/driver"
	"github.com/orthrus-go/orthrus/locker/inspect"
)

var (
	acquireScript = newScript("fence", "acquire")
	releaseScript = newScript("unlock", "release")
	forceScript   = newScript("unlock", "force")
)

var _ inspect.Inspector = (*Engine)(nil)

// mutexHold is a mutex's hold: the lock "<token>:<owner>" and its fencing
// counter.
type mutexHold struct {
	hold
	fence string
	// The acquire script's arguments until granted, then the release
	// script's, read only from then on.
	args [8]any
}

func (e *Engine) newMutexHold(h *driver.Hold) *mutexHold {
	lock, fence := e.mutexKeys(h.Name)
	m := &mutexHold{hold: newHold(h, lock, h.Life()), fence: fence}
	m.inTurn = true
	// numkeys is a string: go-redis's Cluster routing reads it as one.
	m.args = [8]any{"evalsha", &acquireScript.sha, "2", &m.lock, &m.fence, &m.owner, &m.ttl, &e.idle}
	return m
}

func (m *mutexHold) attempt(ctx context.Context, e *Engine) (int64, error) {
	return e.batch.run(ctx, acquireScript, m.args[:])
}

func (m *mutexHold) granted(e *Engine, token int64) {
	m.token = uint64(token)
	m.args = [8]any{"evalsha", &releaseScript.sha, "1", &m.lock, &m.token, &m.owner, &e.numsub, &e.publish}
}

func (m *mutexHold) release(ctx context.Context, e *Engine) (int64, error) {
	return e.batch.release(ctx, releaseScript, m.args[:])
}

func (m *mutexHold) renewal() (*string, any) { return &m.lock, "s" }

// withdraw is never called: a mutex's waiters have no ticket.
func (m *mutexHold) withdraw(context.Context, *Engine) {}

// Inspect reports who holds name and how many processes wait for it. Redis
// does not queue waiters: they are counted as subscribers of the name's
// wake-up channel. A fair engine (WithFair) does: Waiters lists its queue
// in order of arrival (first in line first when every weight is 1; Token
// is each waiter's ticket, TTL the time its place has left unless
// refreshed), and Subscribers is 0.
func (e *Engine) Inspect(ctx context.Context, name string) (inspect.Inspection, error) {
	if err := e.checkOperation(name); err != nil {
		return inspect.Inspection{}, err
	}
	k := fairKeys(e.LockKey(name))
	keys := k[:1]
	if e.fq != nil {
		keys = []string{k[0], k[2]}
	}
	r, err := e.inspectKeys(ctx, inspectScript, "inspect", name, keys)
	if err != nil {
		return inspect.Inspection{}, err
	}
	in := inspect.Inspection{Holder: r.holder()}
	if e.fq != nil {
		ws := waiters(r.set(0), r.now, inspect.KindMutex)
		byToken(ws)
		for _, w := range ws {
			in.Waiters = append(in.Waiters, w.Holder)
		}
	} else if in.Subscribers, err = e.subscribers(ctx, k[0]+channelSuffix); err != nil {
		return inspect.Inspection{}, e.fail(ctx, "inspect", name, err)
	}
	return in, nil
}

// parseHolder reads a lock's value, "<token>:<owner>".
func parseHolder(v string) inspect.Holder {
	tok, owner, _ := strings.Cut(v, ":")
	token, _ := strconv.ParseUint(tok, 10, 64)
	return inspect.Holder{Owner: owner, Token: token}
}

func (e *Engine) subscribers(ctx context.Context, channel string) (int, error) {
	if e.cluster != nil {
		node, err := e.cluster.MasterForKey(ctx, channel)
		if err != nil {
			return 0, err
		}
		m, err := node.PubSubShardNumSub(ctx, channel).Result()
		return int(m[channel]), err
	}
	m, err := e.client.PubSubNumSub(ctx, channel).Result()
	return int(m[channel]), err
}

// ForceUnlock removes the current hold of the mutex name whoever owns it,
// wakes the waiters (on a fair engine, the first in line) and returns the
// hold it removed; ErrNotHeld when the name was free. The owner learns of
// it at its next renewal (Lost closes). For operators clearing a stuck
// hold; ForceUnlockFamily does it for read-write locks and semaphores.
func (e *Engine) ForceUnlock(ctx context.Context, name string) (inspect.Holder, error) {
	if err := e.checkOperation(name); err != nil {
		return inspect.Holder{}, err
	}
	script, keys := forceScript, []string{e.LockKey(name)}
	if e.fq != nil {
		k := fairKeys(keys[0])
		script, keys = fairForceScript, k[:]
	}
	v, err := script.run(ctx, e.client, keys, e.numsub, e.publish).Text()
	if errors.Is(err, goredis.Nil) {
		return inspect.Holder{}, fmt.Errorf("redis: force unlock %q: %w", name, locker.ErrNotHeld)
	}
	if err != nil {
		return inspect.Holder{}, e.fail(ctx, "force unlock", name, err)
	}
	return parseHolder(v), nil
}

// checkOperation refuses an operator call with a bad name or on a closed
// engine.
func (e *Engine) checkOperation(name string) error {
	if err := driver.ValidateName(name); err != nil {
		return err
	}
	if e.core.Closed() {
		return fmt.Errorf("redis: %w", locker.ErrClosed)
	}
	return nil
}
