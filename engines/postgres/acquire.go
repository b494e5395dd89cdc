package postgres

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/orthrus-go/orthrus/internal/lockrule"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/driver"
	"github.com/orthrus-go/orthrus/locker/inspect"
)

// holdState is a hold's or waiter's row: its place in line, the nonce
// that finds a row whose insert got no answer, and the backend that may
// still run that insert (see insert).
type holdState struct {
	fam    int16
	seq    int64
	nonce  int64
	orphan uint32 // its PID; 0: none
}

// entry is one live row of a name, as the rule needs it.
type entry struct {
	seq       int64
	kind      inspect.Kind
	permits   int
	weight    int
	token     int64
	downgrade bool
	granted   bool          // recorded: by SetPermits or a heavy arrival
	left      time.Duration // until it expires, by the database's clock
	mine      bool
}

// queue is a name's live rows in line order, own the caller's index (-1:
// its row is gone) and count the semaphore's stored count.
type queue struct {
	rows  []entry
	own   int
	count int
}

func famOf(k inspect.Kind) int16 {
	switch k {
	case inspect.KindRead, inspect.KindWrite:
		return famRW
	case inspect.KindPermit:
		return famPermit
	}
	return famMutex
}

// lockKey is the advisory lock key text of a name's queue.
func (e *Engine) lockKey(fam int16, name string) string {
	return e.schema + "/" + strconv.Itoa(int(fam)) + "/" + name
}

// Acquire implements driver.Backend: one round trip enqueues the row and
// reads the queue, lockrule decides, and a waiter re-reads its queue when
// a notification or its fallback timer wakes it.
func (e *Engine) Acquire(ctx context.Context, h *driver.Hold, wait bool) (bool, error) {
	if !e.start() {
		return false, e.fail("acquire", h.Name, locker.ErrClosed)
	}
	st := &holdState{fam: famOf(h.Kind), nonce: rand.Int64()}
	var w *waiter
	if wait {
		w = e.hub.join(st.fam, h.Name)
		defer e.hub.leave(w)
	}
	// TryLock ranks as without a weight: it never waits to be passed.
	weight := int16(1)
	if wait {
		weight = int16(max(h.Weight, 1))
	}
	q, err := e.enqueue(ctx, h, st, weight)
	waited := false
	for {
		if err != nil {
			if uncertain(err) {
				e.withdrawLater(h, st)
			}
			return false, e.fail("acquire", h.Name, err)
		}
		if q.own < 0 { // the waiter's row expired under it: in line again
			h.Asking()
			q, err = e.enqueue(ctx, h, st, weight)
			continue
		}
		v := q.decide()
		if v.Granted {
			e.grant(ctx, h, st, q.rows[q.own].token, waited)
			return true, nil
		}
		if !wait {
			e.withdraw(ctx, h, st)
			return false, nil
		}
		if err := e.await(ctx, w, q, v, h); err != nil {
			if ctx.Err() != nil {
				e.withdrawLater(h, st)
			} else {
				// Closing: the Core's workers may no longer start.
				e.withdraw(ctx, h, st)
			}
			return false, err
		}
		waited = true
		h.Asking()
		q, err = e.recheck(ctx, h, st)
	}
}

// uncertain tells a failed request that may have left the caller's row:
// one the database did not answer (an error it answered rolled back the
// whole batch).
func uncertain(err error) bool {
	var pgErr *pgconn.PgError
	return !errors.As(err, &pgErr) && !errors.Is(err, errMismatch)
}

// retryAborted runs tx until PostgreSQL does not abort it as a deadlock's
// victim or a serialization failure, or ctx ends. Such an abort rolled the
// whole transaction back, and it says nothing of the database's health, so
// the caller's budget goes on trying: a transaction marking several rows of
// a name (a heavy arrival's, SetPermits') can deadlock with a renewal that
// locks the same rows in another order.
func retryAborted(ctx context.Context, tx func() error) error {
	for {
		err := tx()
		var pgErr *pgconn.PgError
		// 40P01 deadlock_detected, 40001 serialization_failure.
		if !errors.As(err, &pgErr) || (pgErr.Code != "40P01" && pgErr.Code != "40001") || ctx.Err() != nil {
			return err
		}
	}
}

// decide applies the rule to the caller's row. While another row is
// pending (a heavy arrival not yet settled), the caller concludes no grant
// the rule has not recorded: it waits for that row to settle or go.
func (q *queue) decide() lockrule.Verdict {
	entries, held := q.rule()
	if held[q.own] || entries[q.own].Downgrade {
		return lockrule.Verdict{Granted: true}
	}
	var pending []int
	for i, r := range q.rows {
		if r.weight < 0 && i != q.own {
			pending = append(pending, i)
		}
	}
	if len(pending) > 0 {
		return lockrule.Verdict{Blockers: pending}
	}
	return lockrule.DecideHeld(entries, held, q.own, q.count)
}

// rule returns the queue as the rule reads it, and which of its rows are
// held already (see markDowngraded).
func (q *queue) rule() ([]lockrule.Entry, []bool) {
	out := make([]lockrule.Entry, len(q.rows))
	held := make([]bool, len(q.rows))
	for i, r := range q.rows {
		out[i] = lockrule.Entry{Kind: r.kind, Permits: r.permits, Downgrade: r.downgrade, Weight: r.weight}
		held[i] = r.granted
	}
	markDowngraded(out, held, func(i int) int64 { return q.rows[i].token })
	return out, held
}

// markDowngraded adds to held, the rows whose grant is recorded, the
// writers whose downgraded readers prove them held: a downgrade's token is
// its writer's. Nothing else is recorded at a grant; the rule derives the
// rest from the queue.
func markDowngraded(q []lockrule.Entry, held []bool, token func(int) int64) {
	for j, d := range q {
		if !d.Downgrade {
			continue
		}
		for i := range q {
			held[i] = held[i] || q[i].Kind == inspect.KindWrite && token(i) == token(j)
		}
	}
}

// grant fills h, whose row holds token (see the recheck statement). A
// permit granted after a wait tells the waiter behind it, which waits for
// this grant (lockrule: the entry ranked before it).
func (e *Engine) grant(ctx context.Context, h *driver.Hold, st *holdState, token int64, waited bool) {
	h.Token = uint64(token)
	h.State = st
	// A fixed lease with a lock delay is forgotten by the Core without a
	// release: it would stay in held for good.
	if h.Renew || h.Delay == 0 {
		e.heldMu.Lock()
		e.held[st.seq] = h
		e.heldMu.Unlock()
	}
	if waited && h.Kind == inspect.KindPermit {
		rctx, cancel := e.cleanupContext(ctx)
		defer cancel()
		if _, err := e.pool.Exec(rctx, e.sql.notify, strconv.Itoa(int(st.fam))+"g:"+strconv.FormatInt(st.seq, 10)+":"+h.Name); err != nil {
			e.log.Debug("postgres: telling the next permit waiter failed; it wakes by its timer", "name", h.Name, "err", err)
		}
	}
}

// enqueue inserts the caller's row and reads the name's queue, in one
// batch: one round trip, one transaction under the name's advisory lock.
// A heavy row (weight above 1) takes enqueueHeavy's three.
func (e *Engine) enqueue(ctx context.Context, h *driver.Hold, st *holdState, weight int16) (queue, error) {
	rctx, cancel := e.bound(ctx)
	defer cancel()
	if err := e.ready(rctx); err != nil {
		return queue{}, err
	}
	if weight > 1 {
		return e.enqueueHeavy(rctx, h, st, weight)
	}
	b := &pgx.Batch{}
	e.queueLock(b, h, st)
	e.queueInsert(b, h, st, weight)
	return e.insert(rctx, h, st, b)
}

// insert sends b, which inserts the caller's row and reads its queue. A
// connection dropped under it (its context ended, the server did not
// answer) may leave its backend running the insert, which the cancel
// request pgx sends does not stop if the backend has not read the batch
// yet or is committing: it may commit the row after the caller's
// withdrawal ran. st notes that backend; withdrawRow ends it first.
func (e *Engine) insert(ctx context.Context, h *driver.Hold, st *holdState, b *pgx.Batch) (queue, error) {
	conn, err := e.pool.Acquire(ctx)
	if err != nil {
		return queue{}, err
	}
	defer conn.Release()
	q, err := readBatch(conn.SendBatch(ctx, b), b.Len()-1, 0, h.Limit)
	if pc := conn.Conn().PgConn(); pc.IsClosed() {
		st.orphan = pc.PID()
	}
	return placed(q, st, err)
}

// enqueueHeavy inserts a heavy row, which may rank ahead of rows that came
// before it, so that it cannot take a grant from one of them. The row is
// inserted pending (its weight negated) as a weight-1 row is; then, in one
// transaction under the name's advisory lock, the arrival looks at the
// queue, records as granted the rows the rule grants there (pending rows
// left out), settles its row and reads the queue again. Three round trips,
// with the lock held over the second answer's way back.
func (e *Engine) enqueueHeavy(ctx context.Context, h *driver.Hold, st *holdState, weight int16) (queue, error) {
	b := &pgx.Batch{}
	e.queueLock(b, h, st)
	e.queueInsert(b, h, st, -weight)
	q, err := e.insert(ctx, h, st, b)
	if err != nil {
		return queue{}, err
	}
	err = retryAborted(ctx, func() error {
		if e.beforeSettle != nil {
			e.beforeSettle()
		}
		q, err = e.settle(ctx, h, st)
		return err
	})
	if err != nil && !uncertain(err) {
		e.withdrawLater(h, st) // the pending row was inserted
	}
	return q, err
}

// settle is enqueueHeavy's transaction.
func (e *Engine) settle(ctx context.Context, h *driver.Hold, st *holdState) (queue, error) {
	conn, err := e.pool.Acquire(ctx)
	if err != nil {
		return queue{}, err
	}
	// A connection a failure left in the transaction is closed, not reused.
	defer conn.Release()
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(e.sql.lockName, e.lockKey(st.fam, h.Name))
	b.Queue(e.sql.look, st.fam, h.Name)
	before, err := readBatch(conn.SendBatch(ctx, b), b.Len()-1, 0, h.Limit)
	if err != nil {
		return queue{}, err
	}
	before.rows = slices.DeleteFunc(before.rows, func(r entry) bool { return r.weight < 0 })
	entries, held := before.rule()
	var seqs []int64
	for i, g := range lockrule.Grants(entries, held, before.count) {
		if g && !held[i] {
			seqs = append(seqs, before.rows[i].seq)
		}
	}
	b = &pgx.Batch{}
	b.Queue(e.sql.mark, st.fam, h.Name, seqs)
	b.Queue(e.sql.settle, st.fam, h.Name, st.seq)
	b.Queue(e.sql.recheck, st.fam, h.Name, st.seq, h.Life().Seconds())
	b.Queue("COMMIT")
	return readBatch(conn.SendBatch(ctx, b), 2, 1, h.Limit)
}

// queueLock queues the name's advisory lock and, for a semaphore, the
// stored count's first value.
func (e *Engine) queueLock(b *pgx.Batch, h *driver.Hold, st *holdState) {
	b.Queue(e.sql.lockName, e.lockKey(st.fam, h.Name))
	if h.Kind == inspect.KindPermit {
		b.Queue(e.sql.countInit, h.Name, h.Limit)
	}
}

// queueInsert queues the insert of the caller's row and the read of its
// queue.
func (e *Engine) queueInsert(b *pgx.Batch, h *driver.Hold, st *holdState, weight int16) {
	var writer int64
	if h.Writer != nil {
		writer = int64(h.Writer.Token)
	}
	b.Queue(e.sql.enqueue, st.fam, h.Name, int16(h.Kind), h.Owner, st.nonce, max(h.Permits, 1),
		h.Writer != nil, writer, h.Life().Seconds(), h.CheckLimit, h.Limit, weight)
}

// placed checks that the insert of enqueue's queue q found its condition
// (the stored count) and notes the row's seq.
func placed(q queue, st *holdState, err error) (queue, error) {
	if err == nil && q.own < 0 {
		err = errMismatch // the insert's condition: the stored count differs
	}
	if err == nil {
		st.seq = q.rows[q.own].seq
	}
	return q, err
}

// readBatch reads a batch's results: before statements, the queue's rows,
// after statements; limit stands for a missing count.
func readBatch(br pgx.BatchResults, before, after, limit int) (queue, error) {
	var (
		q   queue
		err error
	)
	for i := 0; err == nil && i < before; i++ {
		_, err = br.Exec()
	}
	if err == nil {
		rows, _ := br.Query()
		q, err = readQueue(rows, limit)
	}
	for i := 0; err == nil && i < after; i++ {
		_, err = br.Exec()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return q, err
}

// recheck reads the rows that may count against the waiter's, and
// extends the waiter's own row.
func (e *Engine) recheck(ctx context.Context, h *driver.Hold, st *holdState) (queue, error) {
	rctx, cancel := e.bound(ctx)
	defer cancel()
	rows, _ := e.pool.Query(rctx, e.sql.recheck, st.fam, h.Name, st.seq, h.Life().Seconds())
	return readQueue(rows, h.Limit)
}

// readQueue scans rows of (seq, kind, permits, downgrade, left, mine,
// count) into a queue in line order; limit stands for a missing count.
func readQueue(rows pgx.Rows, limit int) (queue, error) {
	q := queue{own: -1, count: limit}
	for rows.Next() {
		var (
			r            entry
			kind, weight int16
			perm         int32
			left         float64
			count        *int32
		)
		if err := rows.Scan(&r.seq, &kind, &perm, &r.downgrade, &r.granted, &weight, &r.token, &left, &r.mine, &count); err != nil {
			rows.Close()
			return queue{}, err
		}
		r.kind, r.permits, r.weight = inspect.Kind(kind), int(perm), int(weight)
		r.left = time.Duration(left * float64(time.Second))
		if count != nil {
			q.count = int(*count)
		}
		q.rows = append(q.rows, r)
	}
	if err := rows.Err(); err != nil {
		return queue{}, err
	}
	slices.SortFunc(q.rows, func(a, b entry) int { return int(a.seq - b.seq) })
	for i := range q.rows {
		if q.rows[i].mine {
			q.own = i
		}
	}
	return q, nil
}

// await waits until a notification may have changed the verdict v, the
// soonest of its blockers expires, or the waiter's row needs refreshing
// (a third of its life): no polling faster than that.
func (e *Engine) await(ctx context.Context, w *waiter, q queue, v lockrule.Verdict, h *driver.Hold) error {
	blockers := make([]int64, len(v.Blockers))
	next := h.Life() / 3
	for i, b := range v.Blockers {
		blockers[i] = q.rows[b].seq
		next = min(next, q.rows[b].left+expirySlack)
	}
	if e.hub.expect(w, blockers, v.Count) {
		return nil // woken while the queue was read
	}
	t := time.NewTimer(max(next, 0))
	defer t.Stop()
	select {
	case <-w.wake:
		return nil
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-e.life.Done():
		return e.fail("acquire", h.Name, locker.ErrClosed)
	}
}

// expirySlack: a blocker is read again this long after its expiry, so that
// the database's clock has passed it too.
const expirySlack = 5 * time.Millisecond

// withdraw deletes the row of an acquisition that is not granted; on
// failure, a worker goes on trying.
func (e *Engine) withdraw(ctx context.Context, h *driver.Hold, st *holdState) {
	rctx, cancel := e.cleanupContext(ctx)
	defer cancel()
	if err := e.withdrawRow(rctx, h, st); err != nil {
		e.withdrawLater(h, st)
	}
}

// withdrawRow deletes the row an acquisition may have left, found by its
// nonce, and tells those behind it. The backend that may still run its
// insert (st.orphan) is ended first and waited for, up to half the
// request timeout: a DELETE before that backend's commit would find
// nothing, and the row would stand in line until its TTL. Once the
// backend is gone, its row is committed or never will be.
func (e *Engine) withdrawRow(ctx context.Context, h *driver.Hold, st *holdState) error {
	if st.orphan != 0 {
		var gone bool
		wait := max(e.timeout/2, time.Millisecond).Milliseconds()
		err := e.pool.QueryRow(ctx, e.sql.endBackend, int32(st.orphan), wait).Scan(&gone)
		var pgErr *pgconn.PgError
		switch {
		case errors.As(err, &pgErr):
			// Refused (before PostgreSQL 14, or a role that may not end
			// it): the DELETE alone still removes a row committed by now.
			e.log.Debug("postgres: could not end the backend of a dropped insert", "name", h.Name, "err", err)
		case err != nil:
			return err
		case !gone:
			return errOrphanRuns
		}
	}
	_, err := e.pool.Exec(ctx, e.sql.withdraw, st.fam, h.Name, st.nonce)
	return err
}

// errOrphanRuns: the backend of a dropped insert did not end in time.
var errOrphanRuns = errors.New("the backend of a dropped insert still runs")

// withdrawLater deletes, on a worker, the row an acquisition may have left
// (found by its nonce: its insert may have gone unanswered), trying again
// within the release timeout while the database does not answer; the row
// expires by itself after that.
func (e *Engine) withdrawLater(h *driver.Hold, st *holdState) {
	e.core.Go(func(bg context.Context) {
		ctx, cancel := context.WithTimeout(bg, h.ReleaseTimeout)
		defer cancel()
		for delay := 50 * time.Millisecond; ; delay = min(2*delay, time.Second) {
			rctx, rcancel := e.bound(ctx)
			err := e.withdrawRow(rctx, h, st)
			rcancel()
			if err == nil {
				return
			}
			t := time.NewTimer(delay)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				e.log.Warn("postgres: a withdrawn row could not be deleted; it expires by its TTL", "name", h.Name, "err", err)
				return
			}
		}
	})
}

// Release implements driver.Backend: it deletes h's row, if still h's and
// alive, and tells the waiters.
func (e *Engine) Release(ctx context.Context, h *driver.Hold) error {
	st, ok := h.State.(*holdState)
	if !ok {
		return e.fail("release", h.Name, fmt.Errorf("%w: no row", errGone))
	}
	e.forget(st.seq) // before its own notification comes back
	rctx, cancel := e.bound(ctx)
	defer cancel()
	var alive bool
	err := e.pool.QueryRow(rctx, e.sql.release, st.fam, h.Name, st.seq, h.Owner).Scan(nil, &alive)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return e.fail("release", h.Name, errGone)
	case err != nil:
		return e.fail("release", h.Name, err)
	case !alive:
		return e.fail("release", h.Name, fmt.Errorf("%w: expired before its release", errGone))
	}
	return nil
}

// Renew implements driver.Renewer: one statement per life (a chunk's
// holds nearly always share one) extends the holds' rows; a hold whose
// row is gone or expired is lost.
func (e *Engine) Renew(ctx context.Context, holds []*driver.Hold) []error {
	errs := make([]error, len(holds))
	rctx, cancel := e.bound(ctx)
	defer cancel()
	byLife := make(map[time.Duration][]int, 1)
	for i, h := range holds {
		byLife[h.Life()] = append(byLife[h.Life()], i)
	}
	for life, idx := range byLife {
		seqs := make([]int64, len(idx))
		for k, i := range idx {
			seqs[k] = holdSeq(holds[i])
		}
		rows, _ := e.pool.Query(rctx, e.sql.renew, seqs, life.Seconds())
		missing, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		for k, i := range idx {
			switch {
			case err != nil:
				errs[i] = e.fail("renew", holds[i].Name, err)
			case slices.Contains(missing, seqs[k]):
				e.forget(seqs[k])
				errs[i] = e.fail("renew", holds[i].Name, errGone)
			}
		}
	}
	return errs
}

// holdSeq returns the seq of h's row, unique in the schema.
func holdSeq(h *driver.Hold) int64 {
	if st, _ := h.State.(*holdState); st != nil {
		return st.seq
	}
	return 0
}

// forget drops seq from the holds that notifications are checked against.
func (e *Engine) forget(seq int64) {
	e.heldMu.Lock()
	delete(e.held, seq)
	e.heldMu.Unlock()
}

// gone marks lost the hold of seq, if this engine has it: a notification
// said its row went, and its owner did not release it (a release forgets
// it first). ForceUnlock and the operator's DELETE that notifies so (see
// the package doc) are noticed at once, not at the next renewal.
func (e *Engine) gone(seq int64) {
	e.heldMu.Lock()
	h := e.held[seq]
	delete(e.held, seq)
	e.heldMu.Unlock()
	if h != nil {
		h.MarkGone()
	}
}
