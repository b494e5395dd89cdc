package mem_test

import (
	"testing"

	"github.com/orthrus-go/orthrus/engines/mem"
	"github.com/orthrus-go/orthrus/locker/lockertest"
)

// familyHarness returns engines over one store, as processes over one server.
func familyHarness() lockertest.Factory {
	st, _ := mem.NewStore()
	return func(t *testing.T) lockertest.Harness {
		e, err := mem.New(mem.WithStore(st))
		if err != nil {
			t.Fatal(err)
		}
		return lockertest.Harness{Engine: e}
	}
}

func TestRWConformance(t *testing.T) { lockertest.RunRW(t, familyHarness()) }

func TestSemaphoreConformance(t *testing.T) { lockertest.RunSemaphore(t, familyHarness()) }
