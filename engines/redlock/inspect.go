package redlock

import (
	"context"
	"errors"
	"fmt"

	goredis "github.com/redis/go-redis/v9"

	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/driver"
	"github.com/orthrus-go/orthrus/locker/inspect"
)

var _ inspect.Inspector = (*Engine)(nil)

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
	views := make([]nodeView, 0, len(answers))
	for _, a := range answers {
		if a.err == nil {
			views = append(views, a.val)
			in.Subscribers = max(in.Subscribers, a.val.subscribers)
		}
	}
	in.Holder = majorHolder(views)
	return in, nil
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
	views := make([]nodeView, 0, len(answers))
	for _, a := range answers {
		views = append(views, nodeView{value: a.val})
	}
	h := majorHolder(views)
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
