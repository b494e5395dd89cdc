package mem_test

import (
	"testing"

	"github.com/orthrus-go/orthrus/engines/mem"
	"github.com/orthrus-go/orthrus/locker/lockertest"
)

func TestLockDelay(t *testing.T) {
	st := newStore(t) // shared, as processes share a server
	lockertest.RunLockDelay(t, func(t *testing.T) lockertest.Harness {
		e, err := mem.New(mem.WithStore(st))
		if err != nil {
			t.Fatal(err)
		}
		return lockertest.Harness{Engine: e}
	})
}
