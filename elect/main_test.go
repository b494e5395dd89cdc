package elect_test

import (
	"testing"

	"github.com/orthrus-go/orthrus/internal/fleettest"
)

// servers are shared by the package's tests.
var servers fleettest.Servers

// A leader process a test starts runs its helper test alone.
func TestMain(m *testing.M) { fleettest.Main(m, &servers, helperEnv, frozenEnv, fleetEnv) }
