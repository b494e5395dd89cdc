package redis

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// batcher coalesces the scripts of concurrent callers (acquisitions and
// releases) into pipelines (see Pipelining in doc.go). Each caller waits
// only for a pipeline in flight and its own; the engine has no goroutine
// of its own for it.
type batcher struct {
	client goredis.UniversalClient
	pool   sync.Pool // of *batched
	lanes  int       // the most requests or pipelines in flight; 0: defaultLanes
	// alone: releases never queue (the client ends a request at its
	// context's deadline, so the engine is a driver.DeadlineHonourer).
	alone bool

	mu       sync.Mutex
	inFlight int // callers sending, each of which will hand the queue on
	queue    []*batched
}

// defaultLanes: up to 8 requests or pipelines in flight, each on a
// connection of its own; past that, callers queue and share pipelines. One
// lane made every concurrent caller wait out the round trip before its
// own: 8 goroutines ran at 0.44x the throughput of 8 plain connections (the
// server answers connections together); with no limit, 64 goroutines ran at
// 0.63x, each paying a round trip of its own. 8 lanes: about 0.9x and 1.0x.
const defaultLanes = 8

// batched is one queued script call.
type batched struct {
	ctx    context.Context // the caller's
	cmd    *goredis.IntCmd
	script *luaScript
	ready  chan []*batched // its pipeline, to send (it leads), or nil: answered
}

// run runs s with args (EVALSHA, the SHA, numkeys, ...) and returns its
// integer reply (see evalsha). A queued request whose caller's context
// ends before it is sent is dropped, and run returns ctx.Err(); once sent,
// it is answered.
func (b *batcher) run(ctx context.Context, s *luaScript, args []any) (int64, error) {
	b.mu.Lock()
	if b.inFlight < cmp.Or(b.lanes, defaultLanes) {
		b.inFlight++
		b.mu.Unlock()
		v, err := evalsha(ctx, b.client, s, goredis.NewIntCmd, args).Result()
		b.handOn()
		return v, err
	}
	p, _ := b.pool.Get().(*batched)
	if p == nil {
		p = &batched{ready: make(chan []*batched, 1)}
	}
	p.ctx, p.cmd, p.script = ctx, goredis.NewIntCmd(ctx, args...), s
	b.queue = append(b.queue, p)
	b.mu.Unlock()

	var batch []*batched
	select {
	case batch = <-p.ready:
	case <-ctx.Done():
		if b.withdraw(p) {
			b.recycle(p)
			return 0, ctx.Err()
		}
		batch = <-p.ready // sent meanwhile: bounded by the pipeline's deadline
	}
	if batch != nil {
		b.send(batch)
		b.handOn()
	}
	v, err := p.cmd.Result()
	b.recycle(p)
	return v, err
}

// release runs a release script. With alone, it takes a lane of its own
// even past the limit, never waiting for another's pipeline, so that it
// returns by its context's deadline: Unlock then makes it on its caller's
// goroutine, without a hand-off to a worker and back.
func (b *batcher) release(ctx context.Context, s *luaScript, args []any) (int64, error) {
	if !b.alone {
		return b.run(ctx, s, args)
	}
	b.mu.Lock()
	b.inFlight++
	b.mu.Unlock()
	v, err := evalsha(ctx, b.client, s, goredis.NewIntCmd, args).Result()
	b.handOn()
	return v, err
}

func (b *batcher) recycle(p *batched) {
	p.ctx, p.cmd, p.script = nil, nil, nil
	b.pool.Put(p)
}

// withdraw takes p out of the queue, unless it has been sent.
func (b *batcher) withdraw(p *batched) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	i := slices.Index(b.queue, p)
	if i < 0 {
		return false
	}
	b.queue = slices.Delete(b.queue, i, i+1)
	return true
}

// handOn passes the queue, if any, to its first request, which sends it
// in the lane this caller leaves; else the lane is free.
func (b *batcher) handOn() {
	b.mu.Lock()
	batch := b.queue
	b.queue = nil
	if len(batch) == 0 {
		b.inFlight--
	}
	b.mu.Unlock()
	if len(batch) > 0 {
		batch[0].ready <- batch
	}
}

// send runs batch in one pipeline (scripts a server lacks go again as
// EVAL) and wakes every request of it but the first, whose caller sends.
func (b *batcher) send(batch []*batched) {
	ctx, cancel := patient(batch)
	defer cancel()
	cmds := make([]*goredis.IntCmd, len(batch))
	for i, p := range batch {
		cmds[i] = p.cmd
	}
	evalshaEach(ctx, b.client, func(i int) *luaScript { return batch[i].script }, goredis.NewIntCmd, cmds)
	for i, p := range batch {
		p.cmd = cmds[i]
		if i > 0 {
			p.ready <- nil
		}
	}
}

// patient returns the context of a pipeline: it ends when the most patient
// of its callers would give up (never, if one would not), not before, so
// that no caller loses its answer to another's shorter deadline.
func patient(batch []*batched) (context.Context, context.CancelFunc) {
	var latest time.Time
	for _, p := range batch {
		d, ok := p.ctx.Deadline()
		if !ok {
			return context.WithoutCancel(p.ctx), func() {}
		}
		if d.After(latest) {
			latest = d
		}
	}
	return context.WithDeadline(context.WithoutCancel(batch[0].ctx), latest)
}
