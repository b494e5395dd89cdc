package main

import (
	"log/slog"

	"github.com/orthrus-go/orthrus/engines/mem"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/faults"
	"github.com/orthrus-go/orthrus/switcher"
)

// memPair is the drill with no server at all: two in-memory engines, each
// its own store as if on two hosts, the primary behind a fault wrapper
// that --kill-at makes refuse every call, as a killed server would.
type memPair struct {
	primary *faults.Engine
	sw      *switcher.Switcher
}

func startMemPair(logger *slog.Logger, opts []switcher.Option, engOpts ...mem.Option) (*memPair, error) {
	var engines []locker.Engine
	for _, name := range []string{"mem-primary", "mem-secondary"} {
		st, err := mem.NewStore()
		if err != nil {
			return nil, err
		}
		e, err := mem.New(append([]mem.Option{mem.WithName(name), mem.WithStore(st), mem.WithLogger(logger)}, engOpts...)...)
		if err != nil {
			return nil, err
		}
		engines = append(engines, e)
	}
	primary, err := faults.Wrap(engines[0])
	if err != nil {
		return nil, err
	}
	engines[0] = primary
	sw, err := switcher.New(engines, opts...)
	if err != nil {
		return nil, err
	}
	return &memPair{primary: primary, sw: sw}, nil
}

// kill makes the primary refuse every call from now on.
func (p *memPair) kill() error {
	p.primary.Refuse()
	return nil
}
