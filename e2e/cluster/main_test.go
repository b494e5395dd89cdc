package cluster_test

import (
	"testing"

	"github.com/orthrus-go/orthrus/internal/testmain"
)

// Every test starts the cluster it breaks; goleak checks that nothing
// outlives them.
func TestMain(m *testing.M) {
	testmain.Run(m, func() (func(), error) { return func() {}, nil })
}
