// Package testmain runs a package's tests around servers started once for
// the whole package (its Example functions need them too), then checks that
// no goroutine outlived the tests.
package testmain

import (
	"errors"
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/orthrus-go/orthrus/internal/testserver"
)

// Run calls start, runs the tests, calls the stop function start returned,
// verifies with goleak that nothing is left running, and exits. A server
// that is not installed fails the run when CI=true and skips the package
// otherwise, saying what to install.
func Run(m *testing.M, start func() (stop func(), err error)) {
	os.Exit(run(m, start))
}

func run(m *testing.M, start func() (func(), error)) int {
	stop, err := start()
	if err != nil {
		if errors.Is(err, testserver.ErrNotInstalled) && os.Getenv("CI") != "true" {
			fmt.Fprintf(os.Stderr, "SKIP: %v (scripts/test installs it)\n", err)
			return 0
		}
		fmt.Fprintf(os.Stderr, "FAIL: starting test servers: %v\n", err)
		return 1
	}
	code := m.Run()
	stop()
	if code == 0 {
		if err := goleak.Find(toxiproxyStranded); err != nil {
			fmt.Fprintf(os.Stderr, "FAIL: goroutines left behind: %v\n", err)
			return 1
		}
	}
	return code
}

// toxiproxyStranded is a goroutine toxiproxy (internal/netfault) strands,
// in v2.5.0 as in v2.12.0: when a link's destination closes while bytes
// still flow (a link cut during traffic), its writer's io.Copy returns and
// nobody drains the link's output again, so the last toxic blocks sending
// to it for good. It holds neither a server nor a port; everything else of
// a proxy is still checked.
var toxiproxyStranded = goleak.IgnoreTopFunction("github.com/Shopify/toxiproxy/v2/toxics.(*NoopToxic).Pipe")
