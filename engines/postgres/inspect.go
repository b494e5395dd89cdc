package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/orthrus-go/orthrus/internal/lockrule"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/driver"
	"github.com/orthrus-go/orthrus/locker/inspect"
)

var (
	_ inspect.Inspector       = (*Engine)(nil)
	_ inspect.FamilyInspector = (*Engine)(nil)
)

// shown is one live row as an operator sees it, with the rule's verdict.
type shown struct {
	seq     int64
	holder  inspect.FamilyHolder
	granted bool
}

// look reads the live rows of a name of fam, in line order, and which of
// them the rule grants (a waiter the rule grants but that has not read
// its queue yet shows as a holder), with the semaphore's stored count.
func (e *Engine) look(ctx context.Context, fam int16, name string) ([]shown, int, error) {
	if err := e.operable(name); err != nil {
		return nil, 0, err
	}
	rctx, cancel := e.bound(ctx)
	defer cancel()
	if err := e.ready(rctx); err != nil {
		return nil, 0, err
	}
	return e.read(rctx, e.pool, fam, name)
}

// querier is a pool or a transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// read is look's query, through q.
func (e *Engine) read(ctx context.Context, q querier, fam int16, name string) ([]shown, int, error) {
	rows, _ := q.Query(ctx, e.sql.inspect, fam, name)
	var (
		out     []shown
		entries []lockrule.Entry
		held    []bool
	)
	for rows.Next() {
		var (
			s                   shown
			kind, weight        int16
			perm                int32
			token               int64
			left                float64
			downgraded, granted bool
		)
		if err := rows.Scan(&s.seq, &kind, &s.holder.Owner, &perm, &token, &left, &downgraded, &granted, &weight); err != nil {
			rows.Close()
			return nil, 0, err
		}
		s.holder.Kind, s.holder.Permits, s.holder.Token = inspect.Kind(kind), int(perm), uint64(token)
		s.holder.TTL = time.Duration(left * float64(time.Second))
		out = append(out, s)
		entries = append(entries, lockrule.Entry{Kind: s.holder.Kind, Permits: int(perm), Downgrade: downgraded, Weight: int(weight)})
		held = append(held, granted)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, err
	}
	count := 0
	if fam == famPermit {
		if err := q.QueryRow(ctx, e.sql.countGet, name).Scan(&count); err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return nil, 0, err
		}
	}
	markDowngraded(entries, held, func(i int) int64 { return int64(out[i].holder.Token) })
	for i, g := range lockrule.Grants(entries, held, count) {
		out[i].granted = g
	}
	return out, count, nil
}

// operable refuses an operator's call on a closed engine or a bad name.
func (e *Engine) operable(name string) error {
	if e.isClosed() {
		return locker.ErrClosed
	}
	return driver.ValidateName(name)
}

// Inspect implements inspect.Inspector.
func (e *Engine) Inspect(ctx context.Context, name string) (inspect.Inspection, error) {
	rows, _, err := e.look(ctx, famMutex, name)
	if err != nil {
		return inspect.Inspection{}, e.fail("inspect", name, err)
	}
	var in inspect.Inspection
	for _, r := range rows {
		if r.granted && in.Holder == nil {
			h := r.holder.Holder
			in.Holder = &h
			continue
		}
		in.Waiters = append(in.Waiters, r.holder.Holder)
	}
	return in, nil
}

// ForceUnlock implements inspect.Inspector: it deletes the holder's row
// and wakes the waiters; the owner finds it gone at its next renewal.
func (e *Engine) ForceUnlock(ctx context.Context, name string) (inspect.Holder, error) {
	rows, _, err := e.look(ctx, famMutex, name)
	if err != nil {
		return inspect.Holder{}, e.fail("force-unlock", name, err)
	}
	for _, r := range rows {
		if r.granted {
			n, err := e.force(ctx, famMutex, name, []int64{r.seq})
			if err != nil {
				return inspect.Holder{}, e.fail("force-unlock", name, err)
			}
			if n == 1 {
				return r.holder.Holder, nil
			}
		}
	}
	return inspect.Holder{}, e.fail("force-unlock", name, locker.ErrNotHeld)
}

// force deletes the rows seqs of a name and wakes their waiters; it
// returns how many it deleted.
func (e *Engine) force(ctx context.Context, fam int16, name string, seqs []int64) (int, error) {
	rctx, cancel := e.bound(ctx)
	defer cancel()
	rows, _ := e.pool.Query(rctx, e.sql.force, fam, name, seqs)
	n := 0
	for rows.Next() {
		n++
	}
	return n, rows.Err()
}

// InspectFamily implements inspect.FamilyInspector.
func (e *Engine) InspectFamily(ctx context.Context, kind inspect.Kind, name string) (inspect.FamilyInspection, error) {
	if err := familyKind(kind); err != nil {
		return inspect.FamilyInspection{}, err
	}
	rows, count, err := e.look(ctx, famOf(kind), name)
	if err != nil {
		return inspect.FamilyInspection{}, e.fail("inspect", name, err)
	}
	in := inspect.FamilyInspection{Permits: count}
	for _, r := range rows {
		if r.granted {
			in.Holders = append(in.Holders, r.holder)
		} else {
			in.Waiters = append(in.Waiters, r.holder)
		}
	}
	return in, nil
}

// ForceUnlockFamily implements inspect.FamilyInspector.
func (e *Engine) ForceUnlockFamily(ctx context.Context, kind inspect.Kind, name string, token uint64) ([]inspect.FamilyHolder, error) {
	if err := familyKind(kind); err != nil {
		return nil, err
	}
	rows, _, err := e.look(ctx, famOf(kind), name)
	if err != nil {
		return nil, e.fail("force-unlock", name, err)
	}
	var (
		seqs  []int64
		ended []inspect.FamilyHolder
	)
	for _, r := range rows {
		if r.granted && (token == 0 || r.holder.Token == token) {
			seqs = append(seqs, r.seq)
			ended = append(ended, r.holder)
		}
	}
	if len(seqs) == 0 {
		return nil, e.fail("force-unlock", name, locker.ErrNotHeld)
	}
	if _, err := e.force(ctx, famOf(kind), name, seqs); err != nil {
		return nil, e.fail("force-unlock", name, err)
	}
	return ended, nil
}

func familyKind(kind inspect.Kind) error {
	if kind == inspect.KindMutex {
		return fmt.Errorf("postgres: %w: kind %v is no read-write lock or semaphore", locker.ErrInvalidArgument, kind)
	}
	return nil
}

// SetPermits implements inspect.FamilyInspector. Under the name's
// advisory lock, the rows the rule grants at the old count are marked
// granted (a lowered count keeps its holders, and a waiter granted but not
// yet told), the count changes, and the semaphore's waiters are woken.
func (e *Engine) SetPermits(ctx context.Context, name string, n int) error {
	if n < 1 {
		return fmt.Errorf("postgres: SetPermits(%q, %d): %w: want at least 1", name, n, locker.ErrInvalidArgument)
	}
	if err := e.operable(name); err != nil {
		return e.fail("set-permits", name, err)
	}
	rctx, cancel := e.bound(ctx)
	defer cancel()
	if err := e.ready(rctx); err != nil {
		return e.fail("set-permits", name, err)
	}
	err := retryAborted(rctx, func() error { return e.setPermits(rctx, name, n) })
	if err != nil {
		return e.fail("set-permits", name, err)
	}
	return nil
}

// setPermits is SetPermits' transaction.
func (e *Engine) setPermits(ctx context.Context, name string, n int) error {
	return pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, e.sql.lockName, e.lockKey(famPermit, name)); err != nil {
			return err
		}
		rows, _, err := e.read(ctx, tx, famPermit, name)
		if err != nil {
			return err
		}
		var granted []int64
		for _, r := range rows {
			if r.granted {
				granted = append(granted, r.seq)
			}
		}
		_, err = tx.Exec(ctx, e.sql.setPermits, name, n, granted)
		return err
	})
}

// RecordedEpoch implements switcher.EpochRecord: a row of the epochs table.
func (e *Engine) RecordedEpoch(ctx context.Context, fleet string) (uint64, error) {
	rctx, cancel := e.bound(ctx)
	defer cancel()
	if err := e.ready(rctx); err != nil {
		return 0, e.fail("epoch", fleet, err)
	}
	var v int64
	err := e.pool.QueryRow(rctx, e.sql.epochGet, fleet).Scan(&v)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return 0, nil
	case err != nil:
		return 0, e.fail("epoch", fleet, err)
	}
	return uint64(v), nil
}

// CompareAndSwapEpoch implements switcher.EpochRecord.
func (e *Engine) CompareAndSwapEpoch(ctx context.Context, fleet string, old, epoch uint64) (bool, error) {
	rctx, cancel := e.bound(ctx)
	defer cancel()
	if err := e.ready(rctx); err != nil {
		return false, e.fail("epoch", fleet, err)
	}
	stmt, args := e.sql.epochSwap, []any{fleet, int64(old), int64(epoch)}
	if old == 0 {
		stmt, args = e.sql.epochInit, []any{fleet, int64(epoch)}
	}
	tag, err := e.pool.Exec(rctx, stmt, args...)
	if err != nil {
		return false, e.fail("epoch", fleet, err)
	}
	return tag.RowsAffected() == 1, nil
}
