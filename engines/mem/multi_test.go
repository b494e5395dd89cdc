package mem_test

import (
	"context"
	"testing"

	"github.com/orthrus-go/orthrus/engines/mem"
	"github.com/orthrus-go/orthrus/locker/lockertest"
)

func TestMultiConformance(t *testing.T) {
	st := newStore(t)
	lockertest.RunMulti(t, func(t *testing.T) lockertest.Harness {
		e, err := mem.New(mem.WithStore(st))
		if err != nil {
			t.Fatal(err)
		}
		return lockertest.Harness{Engine: e, Expire: func(ctx context.Context, name string) error {
			_, err := e.ForceUnlock(ctx, name)
			return err
		}}
	})
}
