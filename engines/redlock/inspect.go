package redlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/driver"
	"github.com/orthrus-go/orthrus/locker/inspect"
)

var _ inspect.Inspector = (*Engine)(nil)

// nodeView is what one node has of a name.
type nodeView struct {
	value       string        // "<token>:<owner>", "" when free
	ttl         time.Duration // the value's
	subscribers int           // of the release channel
}

// Inspect reports who holds name: the owner whose hold most answering nodes
// have (a majority, unless a grant or a release is under way), with the
// highest token and the least TTL its nodes report; and the waiters, as
// the most subscribers any node counts on the release channel (each
// waiting process subscribes on every node). It fails with
// locker.ErrUnavailable when fewer than a majority answer.
func (e *Engine) Inspect(ctx context.Context, name string) (inspect.Inspection, error) {
	if err := e.checkOperation(name); err != nil {
		return inspect.Inspection{}, err
	}
	lock := e.LockKey(name)
	answers := fanOut(ctx, e, e.all, func(ctx context.Context, i int) (nodeView, error) {
		return e.view(ctx, i, lock)
	}, nil)
	ok, errs := tally(answers)
	if ok < e.quorum {
		return inspect.Inspection{}, e.unavailable(ctx, "inspect", name, ok, errs)
	}
	var in inspect.Inspection
	values := make([]string, 0, len(answers))
	for _, a := range answers {
		if a.err == nil {
			values = append(values, a.val.value)
			in.Subscribers = max(in.Subscribers, a.val.subscribers)
		}
	}
	in.Holder = majorHolder(values, func(k int) time.Duration { return answers[k].val.ttl })
	return in, nil
}

// view reads node i's hold of lock and the subscribers of its channel.
func (e *Engine) view(ctx context.Context, i int, lock string) (nodeView, error) {
	r, err := inspectScript.Run(ctx, e.nodes[i], []string{lock}).Slice()
	if err != nil {
		return nodeView{}, err
	}
	v := nodeView{}
	if len(r) >= 3 {
		v.value, _ = r[1].(string)
		pttl, _ := r[2].(int64)
		v.ttl = time.Duration(max(pttl, 0)) * time.Millisecond
	}
	ch := lock + channelSuffix
	m, err := e.nodes[i].PubSubNumSub(ctx, ch).Result()
	v.subscribers = int(m[ch])
	return v, err
}

// majorHolder returns the owner found in most of values ("<token>:<owner>",
// "" for none), with its highest token and least TTL (ttl(k) is values[k]'s);
// nil when every value is empty.
func majorHolder(values []string, ttl func(int) time.Duration) *inspect.Holder {
	count := make(map[string]int)
	byOwner := make(map[string]*inspect.Holder)
	var best *inspect.Holder
	for k, v := range values {
		if v == "" {
			continue
		}
		tok, owner, _ := strings.Cut(v, ":")
		token, _ := strconv.ParseUint(tok, 10, 64)
		h := byOwner[owner]
		if h == nil {
			h = &inspect.Holder{Owner: owner, Token: token, TTL: ttl(k)}
			byOwner[owner] = h
		}
		h.Token, h.TTL = max(h.Token, token), min(h.TTL, ttl(k))
		count[owner]++
		if best == nil || count[owner] > count[best.Owner] {
			best = h
		}
	}
	return best
}

// ForceUnlock removes the hold of name from every node whoever owns it,
// publishing a release on each, and returns the holder most nodes had
// (see Inspect); ErrNotHeld when no node had one. Its owner learns of it at
// its next renewal (Lost closes). It fails with locker.ErrUnavailable
// when fewer than a majority answer and none had a hold.
func (e *Engine) ForceUnlock(ctx context.Context, name string) (inspect.Holder, error) {
	if err := e.checkOperation(name); err != nil {
		return inspect.Holder{}, err
	}
	keys := []string{e.LockKey(name)}
	answers := fanOut(ctx, e, e.all, func(ctx context.Context, i int) (string, error) {
		v, err := forceScript.Run(ctx, e.nodes[i], keys, "numsub", "publish").Text()
		if errors.Is(err, goredis.Nil) {
			return "", nil
		}
		return v, err
	}, nil)
	ok, errs := tally(answers)
	values := make([]string, 0, len(answers))
	for _, a := range answers {
		values = append(values, a.val)
	}
	h := majorHolder(values, func(int) time.Duration { return 0 })
	switch {
	case h != nil:
		return *h, nil
	case ok < e.quorum:
		return inspect.Holder{}, e.unavailable(ctx, "force unlock", name, ok, errs)
	}
	return inspect.Holder{}, fmt.Errorf("redlock: force unlock %q: %w", name, locker.ErrNotHeld)
}

// checkOperation refuses an operator call with a bad name or on a closed
// engine.
func (e *Engine) checkOperation(name string) error {
	if err := driver.ValidateName(name); err != nil {
		return err
	}
	if e.core.Closed() {
		return fmt.Errorf("redlock: %w", locker.ErrClosed)
	}
	return nil
}
