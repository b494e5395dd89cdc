package redis

import (
	"context"
	"fmt"
	"strconv"

	goredis "github.com/redis/go-redis/v9"

	"github.com/orthrus-go/orthrus/locker"
)

var (
	_ locker.KindSupporter   = (*Engine)(nil)
	_ locker.FamilyInspector = (*Engine)(nil)
)

// Supports reports that the engine grants every kind of hold: the mutex,
// both sides of a read-write lock and semaphore permits.
func (e *Engine) Supports(k locker.Kind) bool {
	switch k {
	case locker.KindMutex, locker.KindRead, locker.KindWrite, locker.KindPermit:
		return true
	}
	return false
}

// Suffixes of the read-write lock's and the semaphore's keys, after the
// mutex's key (see family_scripts.go).
const (
	rwSuffix  = ":rw"
	semSuffix = ":sem"
)

// famKeys are the keys of a name's read-write lock (writer, readers,
// waiting writers, fence, waiting readers) or semaphore (holds, count,
// fence, waiters).
func (e *Engine) famKeys(kind locker.Kind, name string) []string {
	k := e.famKeyArray(kind, name)
	if kind == locker.KindPermit {
		return k[:4]
	}
	return k[:]
}

func (e *Engine) famKeyArray(kind locker.Kind, name string) [5]string {
	lock := e.keysFor(name).lock
	if kind == locker.KindPermit {
		base := lock + semSuffix
		return [5]string{base, base + ":n", base + fenceSuffix, base + ":w"}
	}
	base := lock + rwSuffix
	return [5]string{base, base + ":r", base + ":ww", base + fenceSuffix, base + ":wr"}
}

// familySHAs are the SHAs of the family's scripts, kept by the engine so
// that argument lists point to them instead of boxing a copy.
type familySHAs struct {
	rwAcquire, rwRelease, semAcquire, semRelease string
}

func newFamilySHAs() familySHAs {
	return familySHAs{
		rwAcquire: rwAcquireScript.Hash(), rwRelease: rwReleaseScript.Hash(),
		semAcquire: semAcquireScript.Hash(), semRelease: semReleaseScript.Hash(),
	}
}

// fam is the engine's part of a read-write or semaphore hold, beside the
// fields of hold it shares with the mutex (hold.lock is the key the
// wake-up channel is named after). As in hold, the argument lists point
// to the fields, so that building them boxes nothing.
type fam struct {
	kind            locker.Kind
	permits, limit  int64 // permits taken; the opener's count
	keys            [5]string
	mode, writer    string // rwAcquireScript's mode and downgrade arguments
	register, check string // "1" or "0", see the acquire scripts
	// ticket orders a waiter and names its entry among the waiters; set by
	// the attempt that first finds the lock or the permits taken, when the
	// caller will wait (0 before).
	ticket int64
	member string // the hold's entry, once granted
	// abandoned: the caller left while a request was in flight; the
	// worker that runs it cleans up after it (see call.exec).
	abandoned bool
	// The acquire script's arguments until granted, then the release
	// script's; args[:n] are used.
	args [16]any
	n    int
}

// famHold is a hold and its family part, allocated together.
type famHold struct {
	hold
	fam
}

// newFamilyHold readies a hold of the read-write lock or the semaphore.
// A permit's check is "1" while its attempts must compare the opener's
// count with the stored one: until the first answer of its wait.
func (e *Engine) newFamilyHold(h *locker.Hold, wait bool) *hold {
	fh := &famHold{}
	st, f := &fh.hold, &fh.fam
	f.kind, f.permits, f.limit, f.keys = h.Kind, int64(h.Permits), int64(h.Limit), e.famKeyArray(h.Kind, h.Name)
	*st = hold{
		name: h.Name, lock: f.keys[0], fence: f.keys[2],
		owner: h.Owner, ttl: ttlMillis(h.TTL), releaseAfter: h.ReleaseTimeout, fam: f,
	}
	f.register, f.check = "0", "0"
	if wait {
		f.register = "1"
	}
	switch h.Kind {
	case locker.KindPermit:
		if h.CheckLimit {
			f.check = "1"
		}
		f.args, f.n = [16]any{"evalsha", &e.fsha.semAcquire, "4", &f.keys[0], &f.keys[1], &f.keys[2], &f.keys[3],
			&st.owner, &st.ttl, &e.idle, &f.permits, &f.limit, &f.check, &f.ticket, &f.register}, 15
	default:
		st.fence = f.keys[3]
		f.mode = "w"
		if h.Kind == locker.KindRead {
			f.mode = "r"
			if w := h.Writer; w != nil {
				f.writer = member(uint64(w.Token), 0, w.Owner)
			}
		}
		f.args, f.n = [16]any{"evalsha", &e.fsha.rwAcquire, "5", &f.keys[0], &f.keys[1], &f.keys[2], &f.keys[3], &f.keys[4],
			&st.owner, &st.ttl, &e.idle, &f.mode, &f.ticket, &f.register, &f.writer}, 15
	}
	return st
}

// member is a hold's entry: "<token>:<owner>", or "<token>:<permits>:<owner>"
// for permits.
func member(token uint64, permits int, owner string) string {
	s := strconv.FormatUint(token, 10) + ":"
	if permits > 0 {
		s += strconv.Itoa(permits) + ":"
	}
	return s + owner
}

// famRequest runs the acquire script of a family hold: the token, or
// minus the time to wait at most, recording the waiter's ticket.
func (e *Engine) famRequest(ctx context.Context, st *hold) (int64, error) {
	f := st.fam
	script := rwAcquireScript
	if f.kind == locker.KindPermit {
		script = semAcquireScript
	}
	v, err := evalsha(ctx, e.client, script, goredis.NewCmd, f.args[:f.n]).Result()
	if err != nil {
		return 0, err
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

// attemptReply reads the reply of an acquire script that hands out
// tickets: the token (> 0), or {ms to wait at most, ticket}, returned as
// minus the wait and the ticket.
func attemptReply(v any) (r, ticket int64, err error) {
	switch v := v.(type) {
	case int64:
		return v, 0, nil
	case []any:
		if len(v) == 2 {
			wait, ok1 := v[0].(int64)
			ticket, ok2 := v[1].(int64)
			if ok1 && ok2 {
				return -wait, ticket, nil
			}
		}
	}
	return 0, 0, fmt.Errorf("unexpected reply %v", v)
}

// mismatch turns the acquire script's refusal of a semaphore opened with
// another count than the stored one into ErrPermitsMismatch; nil for any
// other error.
func (f *fam) mismatch(name string, err error) error {
	if !goredis.HasErrorPrefix(err, "PERMITS") {
		return nil
	}
	stored := err.Error()[len("PERMITS "):]
	return fmt.Errorf("redis: semaphore %q: opened with %d permits, %s stored: %w", name, f.limit, stored, locker.ErrPermitsMismatch)
}

// famGranted records the token of a family grant and readies its release.
func (e *Engine) famGranted(st *hold, token int64) {
	f := st.fam
	st.token = uint64(token)
	switch f.kind {
	case locker.KindPermit:
		f.member = member(st.token, int(f.permits), st.owner)
		f.args, f.n = [16]any{"evalsha", &e.fsha.semRelease, "2", &f.keys[0], &f.keys[1], &f.member, &e.numsub, &e.publish}, 8
	default:
		f.member = member(st.token, 0, st.owner)
		f.args, f.n = [16]any{"evalsha", &e.fsha.rwRelease, "3", &f.keys[0], &f.keys[1], &f.keys[2], &f.mode, &f.member, &e.numsub, &e.publish}, 10
	}
}

// releaseScript is the script that ends the hold.
func (f *fam) releaseScript() *luaScript {
	if f.kind == locker.KindPermit {
		return semReleaseScript
	}
	return rwReleaseScript
}

// renewal is the key and the kind of the hold's entry in renewScript: a
// writer's string, or a reader's or a permit's entry in its sorted set.
// The kind is boxed already: a constant boxes without allocating.
func (f *fam) renewal() (key *string, kind any) {
	switch f.kind {
	case locker.KindWrite:
		return &f.keys[0], "s"
	case locker.KindRead:
		return &f.keys[1], "z"
	}
	return &f.keys[0], "z"
}

// withdraw removes, in the background, the entry a waiter that did not
// get the lock or its permits may have left among the waiters: unless a
// request is still in flight, whose worker does it once the request is
// done.
func (e *Engine) withdraw(st *hold) {
	if f := st.fam; f.abandoned || f.ticket == 0 {
		return
	}
	// Once the engine is closed, the entry expires with its TTL.
	e.core.Go(func(bg context.Context) { e.unwait(bg, st) })
}

// unwait removes a waiter's entry. A waiting writer's withdrawal wakes the
// readers it held back; a waiting reader or permit waiter held nobody back.
func (e *Engine) unwait(bg context.Context, st *hold) {
	f := st.fam
	if f.ticket == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(bg, st.releaseAfter)
	defer cancel()
	var err error
	switch f.kind {
	case locker.KindWrite:
		args := []any{"evalsha", rwUnwaitScript.Hash(), "2", f.keys[0], f.keys[2],
			member(uint64(f.ticket), 0, st.owner), &e.numsub, &e.publish}
		_, err = e.script(ctx, rwUnwaitScript, args)
	case locker.KindRead:
		err = e.client.ZRem(ctx, f.keys[4], member(uint64(f.ticket), 0, st.owner)).Err()
	default:
		err = e.client.ZRem(ctx, f.keys[3], member(uint64(f.ticket), int(f.permits), st.owner)).Err()
	}
	if err != nil {
		e.log.Warn("redis: withdrawing a waiter failed; its entry ends with its TTL", "name", st.name, "kind", f.kind, "err", err)
	}
}

// interest is what a waiter of the hub waits for: the wake-up messages of
// the read-write lock and the semaphore say who may proceed.
type interest struct {
	kind    locker.Kind
	permits int
	ticket  int64 // a reader's: it may go before writers with a higher one
}

func (st *hold) interest() interest {
	if st.fair != nil {
		return interest{kind: locker.KindMutex, ticket: st.fair.ticket}
	}
	if st.fam == nil {
		return interest{}
	}
	return interest{kind: st.fam.kind, permits: int(st.fam.permits), ticket: st.fam.ticket}
}

// wakeFamily wakes the waiters of c that a family release lets proceed,
// called with the hub's mutex held:
//
//   - "w<ticket>": a writer left (or gave up waiting). Readers go, those
//     with a ticket below the first waiting writer's (all when "w0");
//     when no reader of this process may, one writer tries.
//   - "r": the last reader left: one writer tries.
//   - "p<free>": permits were released: the waiters whose permits fit in
//     free, first come first.
//
// Each process does the same with its own waiters, so a release wakes
// about as many as can proceed in each process, never all.
func wakeFamily(c *channel, msg string) {
	if msg == "" {
		wakeAll(c)
		return
	}
	n, _ := strconv.ParseInt(msg[1:], 10, 64)
	switch msg[0] {
	case 'w':
		woke := false
		for w := c.head; w != nil; w = w.next {
			if w.want.kind == locker.KindRead && (n == 0 || w.want.ticket == 0 || w.want.ticket < n) {
				wake(w)
				woke = true
			}
		}
		if !woke {
			wakeWriter(c)
		}
	case 'r':
		wakeWriter(c)
	case 'p':
		for w := c.head; w != nil && n > 0; w = w.next {
			if p := int64(w.want.permits); p <= n {
				wake(w)
				n -= p
			}
		}
	default:
		wakeAll(c)
	}
}

// wakeWriter wakes the longest waiting writer of c.
func wakeWriter(c *channel) {
	for w := c.head; w != nil; w = w.next {
		if w.want.kind == locker.KindWrite {
			wake(w)
			return
		}
	}
}
