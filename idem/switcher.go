package idem

import (
	"errors"
	"fmt"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/orthrus-go/orthrus/engines/etcd"
	"github.com/orthrus-go/orthrus/engines/redis"
	"github.com/orthrus-go/orthrus/engines/zk"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/switcher"
)

// DefaultCheckPrevious is the budget of the look-up on the previous
// engine's store that FromSwitcher turns on (WithCheckPrevious).
const DefaultCheckPrevious = 300 * time.Millisecond

// Switcher is what FromSwitcher needs of a switcher; *switcher.Switcher
// and the *config.Failover config.Open returns have it.
type Switcher interface {
	Current() string
	Engines() []locker.Engine
	States() []switcher.EngineState
}

// FromSwitcher returns a switched gate (NewSwitched) over a store per
// engine of sw, built on the clients the engines already have: nothing is
// dialled, so it works while engines are down, as config.Open starts, and
// a store answers when its engine's client reconnects. Each store takes
// its engine's name and the store's default namespace. An engine of
// another kind (the in-memory engine, a wrapper) gets no store: while it
// is current, Begin treats the store as unavailable; FromSwitcher fails
// when no engine has one.
//
// Beyond NewSwitched, the gate checks the previous engine's store after a
// switch (WithCheckPrevious(DefaultCheckPrevious), which opts can
// change), and a Done pinned to an engine whose breaker is open queues
// its outcome at once (WithPending) rather than waiting for the request
// timeout. Close the gate: it stops the background recording and the
// ZooKeeper stores' requests; it never closes the engines' clients.
func FromSwitcher(sw Switcher, appKey string, opts ...Option) (*Gate, error) {
	if sw == nil {
		return nil, fmt.Errorf("%w: idem.FromSwitcher: switcher is nil", locker.ErrInvalidArgument)
	}
	var stores []Store
	var zks []*ZKStore
	var skipped []string
	for i, e := range sw.Engines() {
		var s Store
		var err error
		switch e := e.(type) {
		case *redis.Engine:
			s, err = NewRedisStore(e.Client(), WithName(e.Name()))
		case *etcd.Engine:
			s, err = NewEtcdStore(e.Client(), WithName(e.Name()))
		case *zk.Engine:
			conn, acl := e.Conn()
			var z *ZKStore
			if z, err = NewZKStore(conn, acl, WithName(e.Name())); err == nil {
				s, zks = z, append(zks, z)
			}
		default:
			skipped = append(skipped, e.Name())
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("idem.FromSwitcher: engines[%d] %q: %w", i, e.Name(), err)
		}
		stores = append(stores, s)
	}
	if len(stores) == 0 {
		return nil, fmt.Errorf("%w: idem.FromSwitcher: no engine is Redis, etcd or ZooKeeper (%q)", locker.ErrInvalidArgument, skipped)
	}
	g, err := NewSwitched(appKey, sw.Current, stores, append([]Option{WithCheckPrevious(DefaultCheckPrevious)}, opts...)...)
	if err != nil {
		return nil, err
	}
	if len(skipped) > 0 {
		g.set.log.Warn("idem: FromSwitcher: engines without a store; Begin refuses while one is current", "engines", skipped)
	}
	g.down = func(name string) bool {
		for _, st := range sw.States() {
			if st.Name == name {
				return st.Breaker == gobreaker.StateOpen
			}
		}
		return false
	}
	for _, z := range zks {
		g.closers = append(g.closers, z.Close)
	}
	return g, nil
}

// closeStores closes the stores the gate built (FromSwitcher).
func (g *Gate) closeStores() error {
	var errs []error
	for _, c := range g.closers {
		errs = append(errs, c())
	}
	return errors.Join(errs...)
}
