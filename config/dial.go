package config

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

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
// is empty) on their own, without a switcher, source or health checks:
// in parallel, each pinged, all within one start_timeout. An engine that
// does not answer is reported in its Dialed entry rather than failing the
// call, so that a tool can use the engines that did.
//
// Dial fails, before dialling anything, when cfg is nil or invalid (a
// *ValidationError) or a name is not one of its engines (an error naming
// it and wrapping locker.ErrInvalidArgument); and with ctx's error when ctx
// ends first. Close the Engines it returns.
func Dial(ctx context.Context, cfg *Config, names []string, opts ...Option) (*Engines, error) {
	c, o, err := prepare(ctx, "Dial", cfg, opts)
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
		if c.engineIndex(n) < 0 {
			return nil, fmt.Errorf("config: %w: unknown engine %q (want one of %s)", locker.ErrInvalidArgument, n, quoteAll(c.engineNames()))
		}
	}
	tel, err := o.observer()
	if err != nil {
		return nil, err
	}
	out := &Engines{Dialed: make([]Dialed, len(idx))}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for k, i := range idx {
		wg.Go(func() {
			e := &c.Engines[i]
			sctx, cancel := context.WithTimeout(ctx, c.StartTimeout)
			defer cancel()
			t0 := time.Now()
			s, err := startEngine(sctx, c, i, o.logger, tel)
			d := Dialed{Name: e.Name, Took: time.Since(t0)}
			if err != nil {
				d.Err = startError(c, i, err)
			} else {
				d.Engine = s.engine
				mu.Lock()
				out.closers = append(out.closers, func() error { return errors.Join(s.engine.Close(), s.closeClient()) })
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

// Probe starts every engine of cfg on its own, pings it and closes it
// again, and returns one result per engine, in order: nil when it
// answered. It is Dial for every engine, closed at once.
func Probe(ctx context.Context, cfg *Config) ([]error, error) {
	es, err := Dial(ctx, cfg, nil, WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		return nil, err
	}
	defer es.Close()
	errs := make([]error, len(es.Dialed))
	for i, d := range es.Dialed {
		errs[i] = d.Err
	}
	return errs, nil
}

// prepare checks the arguments common to Dial, DialSource and Open's
// siblings and returns a validated copy of cfg with its defaults.
func prepare(ctx context.Context, fn string, cfg *Config, opts []Option) (*Config, openSettings, error) {
	o := openSettings{logger: slog.Default()}
	if ctx == nil {
		return nil, o, fmt.Errorf("config: %s: %w: ctx is nil", fn, locker.ErrInvalidArgument)
	}
	if cfg == nil {
		return nil, o, fmt.Errorf("config: %s: %w: cfg is nil", fn, locker.ErrInvalidArgument)
	}
	for _, opt := range opts {
		if opt == nil {
			return nil, o, fmt.Errorf("config: %s: %w: nil Option", fn, locker.ErrInvalidArgument)
		}
		if err := opt(&o); err != nil {
			return nil, o, err
		}
	}
	c, err := cfg.openCopy() // *_file secrets included, for a Config built in code too
	if err != nil {
		return nil, o, err
	}
	return c, o, nil
}

// engineIndex returns the index of the engine called name, or -1.
func (c *Config) engineIndex(name string) int {
	return slices.IndexFunc(c.Engines, func(e Engine) bool { return e.Name == name })
}

// engineNames returns the engines' names in order.
func (c *Config) engineNames() []string {
	names := make([]string, len(c.Engines))
	for i, e := range c.Engines {
		names[i] = e.Name
	}
	return names
}

// EngineNames returns the names of the configured engines, in order.
func (c *Config) EngineNames() []string { return c.engineNames() }

// HasEngine reports whether name is one of the configured engines.
func (c *Config) HasEngine(name string) bool { return c.engineIndex(name) >= 0 }
