package config

import (
	"errors"
	"fmt"
	"log/slog"

	goredis "github.com/redis/go-redis/v9"

	"github.com/orthrus-go/orthrus/engines/redlock"
	"github.com/orthrus-go/orthrus/telemetry"
)

// buildRedlock builds a redlock engine over one client per address, each
// made as a redis engine's client of that one address; go-redis dials on
// first use, so this never waits for the servers. The engine does not
// close its clients: the started close does.
func buildRedlock(e *Engine, field string, log *slog.Logger, tel *telemetry.Telemetry) (started, error) {
	nodes, closeNodes, err := redlockClients(e, field, engineRedisClient)
	if err != nil {
		return started{}, err
	}
	opts := engineOptions(e, log, tel, redlock.WithName, redlock.WithLogger, redlock.WithObserver, redlock.WithPrefix)
	if e.NodeTimeout > 0 {
		opts = append(opts, redlock.WithNodeTimeout(e.NodeTimeout))
	}
	// An even count of nodes: redlock.New warns on log.
	eng, err := redlock.New(nodes, opts...)
	if err != nil {
		_ = closeNodes()
		return started{}, err
	}
	return started{eng, closeNodes}, nil
}

// redlockClients returns one client per address of a redlock engine, each
// made by client from the engine's settings with that address alone, and
// the close of them all.
func redlockClients(e *Engine, field string, client func(*Engine, string) (goredis.UniversalClient, error)) ([]goredis.UniversalClient, func() error, error) {
	nodes := make([]goredis.UniversalClient, 0, len(e.Addrs))
	closeAll := func() error {
		errs := make([]error, 0, len(nodes))
		for _, n := range nodes {
			errs = append(errs, n.Close())
		}
		return errors.Join(errs...)
	}
	for _, a := range e.Addrs {
		one := *e
		one.Addrs = []string{a}
		c, err := client(&one, field)
		if err != nil {
			_ = closeAll()
			return nil, nil, err
		}
		nodes = append(nodes, c)
	}
	return nodes, closeAll, nil
}

// validateRedlock checks the settings of a redlock engine: at least
// redlock.MinNodes addresses, no address twice, a positive node timeout.
func (e *Engine) validateRedlock(field string, p *problems) {
	addresses(field+".addrs", e.Addrs, p)
	if n := len(e.Addrs); n > 0 && n < redlock.MinNodes {
		p.add(field+".addrs", "redlock needs at least %d independent masters, got %d", redlock.MinNodes, n)
	}
	seen := make(map[string]int, len(e.Addrs))
	for i, a := range e.Addrs {
		if j, dup := seen[a]; dup {
			p.add(fmt.Sprintf("%s.addrs[%d]", field, i), "duplicate address %q (also addrs[%d]): redlock needs independent masters", a, j)
			continue
		}
		seen[a] = i
	}
	p.positive(field+".node_timeout", e.NodeTimeout)
	e.TLS.validate(field+".tls", p)
}
