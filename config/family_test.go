package config_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/inspect"
)

// TestOpenFamilyDefaults: lock.ttl is the default of read-write locks and
// semaphores too, and the caller's options win over it.
func TestOpenFamilyDefaults(t *testing.T) {
	c := loadYAML(t, fmt.Sprintf(`
engines:
  - {name: redis, type: redis, addrs: [%q], prefix: config-family}
lock: {ttl: 7s}
`, redisAddr))
	sw := open(t, c, quiet)
	op := sw.Engines()[0].(inspect.FamilyInspector)
	ttlOf := func(kind inspect.Kind, name string) time.Duration {
		in, err := op.InspectFamily(context.Background(), kind, name)
		if err != nil || len(in.Holders) != 1 {
			t.Fatalf("InspectFamily(%v, %q) = %+v, %v; want one holder", kind, name, in, err)
		}
		return in.Holders[0].TTL
	}
	rw, err := sw.NewRWLock("family-rw")
	if err != nil {
		t.Fatal(err)
	}
	if err := rw.ReadLock().Lock(); err != nil {
		t.Fatal(err)
	}
	defer rw.ReadLock().Unlock()
	if d := ttlOf(inspect.KindRead, "family-rw"); d <= 3*time.Second || d > 7*time.Second {
		t.Errorf("read hold TTL = %v; want lock.ttl, 7s", d)
	}
	sem, err := sw.NewSemaphore("family-sem", 2, locker.WithTTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	p, err := sem.Acquire(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Unlock()
	if d := ttlOf(inspect.KindPermit, "family-sem"); d <= 0 || d > 3*time.Second {
		t.Errorf("permit TTL = %v; want the caller's 3s", d)
	}
}
