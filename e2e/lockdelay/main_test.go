package lockdelay_test

import (
	"testing"

	"github.com/orthrus-go/orthrus/internal/fleettest"
	"github.com/orthrus-go/orthrus/locker"
)

// servers are shared by the package's tests.
var servers fleettest.Servers

// A holder process a test starts (helperEnv set) runs its helper test
// alone.
func TestMain(m *testing.M) { fleettest.Main(m, &servers, helperEnv) }

// newLocker returns a Locker of e, failing the test on an error.
func newLocker(t *testing.T, e locker.Engine, name string, opts ...locker.Option) locker.Handle {
	t.Helper()
	l, err := e.NewLocker(name, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}
