package config

import (
	"context"
	"fmt"
	"log/slog"
	"slices"

	"github.com/orthrus-go/orthrus/locker"
)

// prepare checks the arguments common to Open and lockctl's operator calls
// (through confighook) and returns a validated copy of cfg with its
// defaults.
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
