// Package cfgops holds lockctl's operator calls on a configuration: Dial
// starts some engines on their own, without a switcher, and reports those
// that do not answer instead of failing; DialClient gives the raw client
// of one engine's server; DialSource connects to the source alone, to read
// it, write it, or Snapshot and Restore it byte for byte; a DrillScope
// deletes what a drill left under config.Config.ForDrill's prefixes.
// Everything is started with config's own means (internal/confighook), so
// that it connects exactly as config.Open does.
package cfgops

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/orthrus-go/orthrus/config"
	"github.com/orthrus-go/orthrus/internal/confighook"
	"github.com/orthrus-go/orthrus/locker"
)

// hook is config's means of reaching servers, set in config's init, which
// runs before this package's variables are initialised.
var hook = confighook.Get[config.Config, config.Option]()

// engineIndex returns the index of the engine called name, or -1.
func engineIndex(c *config.Config, name string) int {
	return slices.IndexFunc(c.Engines, func(e config.Engine) bool { return e.Name == name })
}

// unknownEngine is the error of a name that is not one of c's engines.
func unknownEngine(fn string, c *config.Config, name string) error {
	names := make([]string, 0, len(c.Engines))
	for _, e := range c.Engines {
		names = append(names, strconv.Quote(e.Name))
	}
	return fmt.Errorf("config: %s%w: unknown engine %q (want one of %s)", fn, locker.ErrInvalidArgument, name, strings.Join(names, ", "))
}
