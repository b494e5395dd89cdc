package redis

import (
	"context"
	"fmt"

	goredis "github.com/redis/go-redis/v9"

	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/driver"
	"github.com/orthrus-go/orthrus/locker/inspect"
)

var (
	_ inspect.FamilyInspector = (*Engine)(nil)
)

var (
	rwAcquireScript  = newScript("fence", "clock", "rank", "family", "waiting", "rw_acquire")
	rwReleaseScript  = newScript("clock", "family", "rw_release")
	rwUnwaitScript   = newScript("clock", "family", "rw_unwait")
	semAcquireScript = newScript("fence", "clock", "rank", "family", "waiting", "sem_acquire")
	semReleaseScript = newScript("clock", "family", "sem_release")
	semUnwaitScript  = newScript("clock", "family", "sem_unwait")
)

// famKeys are the keys of a name's read-write lock (writer, readers,
// waiting writers, fence, waiting readers) or semaphore (holds, count,
// fence, waiters): see doc.go.
func (e *Engine) famKeys(kind inspect.Kind, name string) [5]string {
	lock := e.LockKey(name)
	if kind == inspect.KindPermit {
		base := lock + ":sem"
		return [5]string{base, base + ":n", base + fenceSuffix, base + ":w"}
	}
	base := lock + ":rw"
	return [5]string{base, base + ":r", base + ":ww", base + fenceSuffix, base + ":wr"}
}

// famHold is a hold of a read-write lock or a semaphore. Its value is its
// entry, made when granted; its lock, the writer's key or the permit
// holds', names the wake-up channel.
type famHold struct {
	hold
	kind           inspect.Kind
	permits, limit int64 // permits taken; the opener's count
	keys           [5]string
	writer         string // the caller's own write hold, for a downgrade
	// check is "1" while the attempts of a permit must compare the
	// opener's count with the stored one: until the first answer.
	check string
	// script is the acquire script until granted, then the release
	// script; args[:n] are its arguments.
	script *luaScript
	args   [16]any
	n      int
}

func (e *Engine) newFamHold(h *driver.Hold, wait bool) *famHold {
	f := &famHold{kind: h.Kind, permits: int64(h.Permits), limit: int64(h.Limit), keys: e.famKeys(h.Kind, h.Name), check: "0"}
	f.hold = newHold(h, f.keys[0], h.TTL)
	register := any("0") // "1" when the caller will wait
	if wait {
		register = "1"
	}
	if h.Kind == inspect.KindPermit {
		if h.CheckLimit {
			f.check = "1"
		}
		f.script, f.n = semAcquireScript, 16
		f.args = [16]any{"evalsha", &semAcquireScript.sha, "4", &f.keys[0], &f.keys[1], &f.keys[2], &f.keys[3],
			&f.owner, &f.ttl, &e.idle, &f.permits, &f.limit, &f.check, &f.ticket, register, weight(h, wait)}
		return f
	}
	if w := h.Writer; w != nil {
		f.writer = member(uint64(w.Token), 0, w.Owner)
	}
	f.script, f.n = rwAcquireScript, 16
	f.args = [16]any{"evalsha", &rwAcquireScript.sha, "5", &f.keys[0], &f.keys[1], &f.keys[2], &f.keys[3], &f.keys[4],
		&f.owner, &f.ttl, &e.idle, f.mode(), &f.ticket, register, &f.writer, weight(h, wait)}
	return f
}

// mode is the side of a read-write hold, as its scripts take it.
func (f *famHold) mode() any {
	if f.kind == inspect.KindRead {
		return "r"
	}
	return "w"
}

func (f *famHold) attempt(ctx context.Context, e *Engine) (int64, error) {
	v, err := evalsha(ctx, e.client, f.script, goredis.NewCmd, f.args[:f.n]).Result()
	if err != nil {
		return 0, f.mismatch(err)
	}
	// The count matched: a change by an operator while this waits is
	// honoured, not refused.
	f.check = "0"
	r, ticket, err := attemptReply(v)
	if err == nil && r <= 0 {
		f.ticket = ticket
	}
	return r, err
}

// mismatch turns the acquire script's refusal of a semaphore opened with
// another count than the stored one into ErrPermitsMismatch.
func (f *famHold) mismatch(err error) error {
	if !goredis.HasErrorPrefix(err, "PERMITS") {
		return err
	}
	stored := err.Error()[len("PERMITS "):]
	return fmt.Errorf("redis: semaphore %q: opened with %d permits, %s stored: %w", f.name, f.limit, stored, locker.ErrPermitsMismatch)
}

func (f *famHold) granted(e *Engine, token int64) {
	f.token = uint64(token)
	if f.kind == inspect.KindPermit {
		f.value = member(f.token, int(f.permits), f.owner)
		f.script, f.n = semReleaseScript, 9
		f.args = [16]any{"evalsha", &semReleaseScript.sha, "3", &f.keys[0], &f.keys[1], &f.keys[3], &f.value, &e.numsub, &e.publish}
		return
	}
	f.value = member(f.token, 0, f.owner)
	f.script, f.n = rwReleaseScript, 11
	f.args = [16]any{"evalsha", &rwReleaseScript.sha, "4", &f.keys[0], &f.keys[1], &f.keys[2], &f.keys[4], f.mode(), &f.value, &e.numsub, &e.publish}
}

func (f *famHold) release(ctx context.Context, e *Engine) (int64, error) {
	return e.batch.release(ctx, f.script, f.args[:f.n])
}

// renewal: a writer's string, or a reader's or a permit's entry in its
// sorted set.
func (f *famHold) renewal() (*string, any) {
	switch f.kind {
	case inspect.KindWrite:
		return &f.keys[0], "s"
	case inspect.KindRead:
		return &f.keys[1], "z"
	}
	return &f.keys[0], "z"
}

// withdraw removes a waiter's entry and wakes the waiters the rule grants
// once it is out of their way.
func (f *famHold) withdraw(ctx context.Context, e *Engine) {
	script := rwUnwaitScript
	args := []any{"evalsha", &rwUnwaitScript.sha, "4", f.keys[0], f.keys[1], f.keys[2], f.keys[4],
		f.mode(), member(uint64(f.ticket), 0, f.owner), &e.numsub, &e.publish}
	if f.kind == inspect.KindPermit {
		script = semUnwaitScript
		args = []any{"evalsha", &semUnwaitScript.sha, "3", f.keys[0], f.keys[1], f.keys[3],
			member(uint64(f.ticket), int(f.permits), f.owner), &e.numsub, &e.publish}
	}
	if _, err := e.batch.run(ctx, script, args); err != nil {
		e.log.Warn("redis: withdrawing a waiter failed; its entry ends with its TTL", "name", f.name, "kind", f.kind, "err", err)
	}
}
