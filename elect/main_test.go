package elect_test

import (
	"os"
	"testing"

	"github.com/orthrus-go/orthrus/internal/fleettest"
	"github.com/orthrus-go/orthrus/internal/testmain"
)

// servers are shared by the package's tests.
var servers fleettest.Servers

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(m.Run()) // a leader process the test kills: no servers of its own
	}
	testmain.Run(m, func() (stop func(), err error) {
		servers, stop, err = fleettest.Start()
		return stop, err
	})
}
