package faults_test

import (
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/engines/mem"
	"github.com/orthrus-go/orthrus/locker/faults"
	"github.com/orthrus-go/orthrus/locker/lockertest"
)

// TestModel checks a healthy wrapper against the lock family's rule: two
// wrappers over one store, the second slowing every call by a latency, so
// that the two processes' calls interleave otherwise than on the bare
// engine. The wrapper does not inspect mutexes: the engine it wraps does.
func TestModel(t *testing.T) {
	st := newStore(t)
	var made int
	lockertest.RunModel(t, func(t *testing.T) lockertest.Harness {
		e, err := mem.New(mem.WithStore(st))
		if err != nil {
			t.Fatal(err)
		}
		w, err := faults.Wrap(e)
		if err != nil {
			t.Fatal(err)
		}
		if made++; made%2 == 0 {
			if err := w.SetLatency(100 * time.Microsecond); err != nil {
				t.Fatal(err)
			}
		}
		return lockertest.Harness{Engine: lockertest.Inspected(w, e)}
	}, lockertest.ModelOps, lockertest.ModelConfig{})
}
