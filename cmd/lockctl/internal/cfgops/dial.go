package cfgops

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/orthrus-go/orthrus/config"
	"github.com/orthrus-go/orthrus/locker"
)

// Dialed is one engine Dial tried to start.
type Dialed struct {
	Name string
	// Engine is the started engine, nil when Err is set. Engines.Close
	// closes it.
	Engine locker.Engine
	// Err says why the engine did not start; it wraps
	// locker.ErrUnavailable when the engine did not answer in time.
	Err error
	// Took is how long the start and its ping took.
	Took time.Duration
}

// Engines are the engines one Dial started, without a switcher: for
// operator tools that must work while another engine is down.
type Engines struct {
	// Dialed holds one entry per engine asked for, in the configuration's
	// order.
	Dialed []Dialed

	closeOnce sync.Once
	closers   []func() error
	closeErr  error
}

// Started returns the engines that answered, in the configuration's order.
func (e *Engines) Started() []locker.Engine {
	var out []locker.Engine
	for _, d := range e.Dialed {
		if d.Engine != nil {
			out = append(out, d.Engine)
		}
	}
	return out
}

// Failed returns the engines that did not start, in the configuration's
// order.
func (e *Engines) Failed() []Dialed {
	var out []Dialed
	for _, d := range e.Dialed {
		if d.Err != nil {
			out = append(out, d)
		}
	}
	return out
}

// Close closes every started engine and the client dialled for it. It is
// idempotent and returns the first call's result.
func (e *Engines) Close() error {
	e.closeOnce.Do(func() {
		errs := make([]error, len(e.closers))
		var wg sync.WaitGroup
		for i, c := range e.closers {
			wg.Go(func() { errs[i] = c() })
		}
		wg.Wait()
		e.closeErr = errors.Join(errs...)
	})
	return e.closeErr
}

// Dial starts the engines of cfg named in names (every engine when names
// is empty) on their own, as config.Open builds them but without a
// switcher, source or health checks: in parallel, each pinged, all within
// one start_timeout. An engine that does not answer is reported in its
// Dialed entry rather than failing the call, so that a tool can use the
// engines that did. config.WithLogger and config.WithMeterProvider apply.
//
// Dial fails, before dialling anything, when cfg is nil or invalid (a
// *config.ValidationError) or a name is not one of its engines (an error
// naming it and wrapping locker.ErrInvalidArgument); and with ctx's error
// when ctx ends first. Close the Engines it returns.
func Dial(ctx context.Context, cfg *config.Config, names []string, opts ...config.Option) (*Engines, error) {
	c, o, err := hook.Prepare(ctx, "Dial", cfg, opts)
	if err != nil {
		return nil, err
	}
	var idx []int
	for i, e := range c.Engines {
		if len(names) == 0 || slices.Contains(names, e.Name) {
			idx = append(idx, i)
		}
	}
	for _, n := range names {
		if engineIndex(c, n) < 0 {
			return nil, unknownEngine("", c, n)
		}
	}
	tel, err := o.Observer()
	if err != nil {
		return nil, err
	}
	out := &Engines{Dialed: make([]Dialed, len(idx))}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for k, i := range idx {
		wg.Go(func() {
			sctx, cancel := context.WithTimeout(ctx, c.StartTimeout)
			defer cancel()
			t0 := time.Now()
			eng, closeClient, err := hook.StartEngine(sctx, c, i, o.Log, tel)
			d := Dialed{Name: c.Engines[i].Name, Took: time.Since(t0), Engine: eng, Err: err}
			if err == nil {
				mu.Lock()
				out.closers = append(out.closers, func() error { return errors.Join(eng.Close(), closeClient()) })
				mu.Unlock()
			}
			out.Dialed[k] = d
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		_ = out.Close()
		return nil, fmt.Errorf("config: Dial: %w", err)
	}
	return out, nil
}
