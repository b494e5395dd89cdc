package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	goredis "github.com/redis/go-redis/v9"

	"github.com/orthrus-go/orthrus/locker"
)

var _ locker.Inspector = (*Engine)(nil)

// Inspect reports who holds name and how many processes wait for it. Redis
// does not queue waiters: they are counted as subscribers of the name's
// wake-up channel. A fair engine (WithFair) does: Waiters lists its queue,
// first in line first, and Subscribers is 0.
func (e *Engine) Inspect(ctx context.Context, name string) (locker.Inspection, error) {
	if err := e.checkOperation(name); err != nil {
		return locker.Inspection{}, err
	}
	if e.fq != nil {
		return e.inspectFair(ctx, name)
	}
	k := e.keysFor(name)
	var value *goredis.StringCmd
	var pttl *goredis.DurationCmd
	if _, err := e.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
		value = p.Get(ctx, k.lock)
		pttl = p.PTTL(ctx, k.lock)
		return nil
	}); err != nil && !errors.Is(err, goredis.Nil) {
		return locker.Inspection{}, e.fail(ctx, "inspect", name, err)
	}
	subs, err := e.subscribers(ctx, k.channel)
	if err != nil {
		return locker.Inspection{}, e.fail(ctx, "inspect", name, err)
	}
	in := locker.Inspection{Subscribers: subs}
	if v, err := value.Result(); err == nil {
		holder := parseHolder(v)
		holder.TTL = max(pttl.Val(), 0)
		in.Holder = &holder
	}
	return in, nil
}

// parseHolder reads a lock's value, "<token>:<owner>".
func parseHolder(v string) locker.Holder {
	tok, owner, _ := strings.Cut(v, ":")
	token, _ := strconv.ParseUint(tok, 10, 64)
	return locker.Holder{Owner: owner, Token: token}
}

func (e *Engine) subscribers(ctx context.Context, channel string) (int, error) {
	if cc, ok := e.client.(*goredis.ClusterClient); ok {
		node, err := cc.MasterForKey(ctx, channel)
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
func (e *Engine) ForceUnlock(ctx context.Context, name string) (locker.Holder, error) {
	if err := e.checkOperation(name); err != nil {
		return locker.Holder{}, err
	}
	var v string
	var err error
	if e.fq != nil {
		v, err = e.forceUnlockFair(ctx, name)
	} else {
		v, err = forceReleaseScript.Run(ctx, e.client, []string{e.keysFor(name).lock}, e.numsub, e.publish).Text()
	}
	if errors.Is(err, goredis.Nil) {
		return locker.Holder{}, fmt.Errorf("redis: force unlock %q: %w", name, locker.ErrNotHeld)
	}
	if err != nil {
		return locker.Holder{}, e.fail(ctx, "force unlock", name, err)
	}
	return parseHolder(v), nil
}

// checkOperation refuses an operator call with a bad name or on a closed
// engine.
func (e *Engine) checkOperation(name string) error {
	if err := locker.ValidateName(name); err != nil {
		return err
	}
	if e.core.Closed() {
		return fmt.Errorf("redis: %w", locker.ErrClosed)
	}
	return nil
}
