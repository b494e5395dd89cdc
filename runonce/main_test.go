package runonce_test

import (
	"testing"

	"github.com/orthrus-go/orthrus/internal/fleettest"
	"github.com/orthrus-go/orthrus/locker"
)

// servers are shared by the package's tests.
var servers fleettest.Servers

// A runner process a test starts (helperEnv set) runs its helper test
// alone.
func TestMain(m *testing.M) { fleettest.Main(m, &servers, helperEnv) }

// process makes the engine of one more process.
type process = fleettest.Process

func processes(t *testing.T) map[string]process { return servers.Processes(t) }

// closing fails the test on err, and closes e when the test ends.
func closing[E locker.Engine](t testing.TB, e E, err error) locker.Engine {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}
