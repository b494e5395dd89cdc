package async

import (
	"context"
	"sync"
	"time"
)

// workerIdle is how long a worker waits for more work before it ends:
// engines hand the pool requests on the hot path, and a new goroutine per
// request would pay for growing its stack every time.
const workerIdle = 2 * time.Second

// Pool runs functions on goroutines it owns, reusing the idle ones. The
// zero Pool is not usable: call NewPool, and Close when done.
type Pool struct {
	ctx     context.Context // the work's: cancelled when Close gives up waiting
	cancel  context.CancelFunc
	idleFor time.Duration
	idle    chan func(context.Context) // to a worker waiting for more work
	stop    chan struct{}              // closed by Stop: idle workers end

	mu      sync.Mutex
	stopped bool
	wg      sync.WaitGroup // the workers
}

// NewPool returns a pool with no workers yet.
func NewPool() *Pool {
	p := &Pool{idleFor: workerIdle, idle: make(chan func(context.Context)), stop: make(chan struct{})}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	return p
}

// Go runs f on a worker of the pool, with a context that Close cancels
// when it gives up waiting for f, which must then return promptly. Go
// reports false, and does not run f, once Stop or Close has begun.
func (p *Pool) Go(f func(ctx context.Context)) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return false
	}
	select {
	case p.idle <- f:
	default:
		p.wg.Add(1)
		go p.worker(f)
	}
	return true
}

// worker runs f, then what Go hands it, until it has been idle for
// idleFor or Stop is called.
func (p *Pool) worker(f func(context.Context)) {
	defer p.wg.Done()
	idle := time.NewTimer(p.idleFor)
	defer idle.Stop()
	for {
		f(p.ctx)
		idle.Reset(p.idleFor)
		select {
		case f = <-p.idle:
		case <-idle.C:
			return
		case <-p.stop:
			return
		}
	}
}

// Stop makes Go refuse work from now on and ends the idle workers; the
// work already started goes on. For an owner that must refuse work before
// it closes what the work uses; Close stops the pool too. It is
// idempotent.
func (p *Pool) Stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.stopped {
		p.stopped = true
		close(p.stop)
	}
}

// Close stops the pool and waits for its work until ctx is done, then
// cancels the work's context and waits for the work to return. It returns
// ctx.Err() when it had to cancel, nil otherwise. It is idempotent.
func (p *Pool) Close(ctx context.Context) error {
	p.Stop()
	done := make(chan struct{})
	go func() {
		p.wg.Wait()
		close(done)
	}()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = ctx.Err()
	}
	p.cancel()
	<-done
	return err
}
