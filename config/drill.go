package config

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/orthrus-go/orthrus/engines/zk"
	"github.com/orthrus-go/orthrus/locker"
)

// drillMark is what a drill-only prefix adds to the engine's prefix.
const drillMark = "-lockctl-drill-"

var drillID = regexp.MustCompile(`^[a-z0-9]{1,32}$`)

// enginePrefix returns the engine's prefix, or its type's default.
func enginePrefix(e *Engine) string {
	switch {
	case e.Prefix != "" && e.Type == TypeZK:
		return ensureSlash(strings.TrimSuffix(e.Prefix, "/"))
	case e.Prefix != "":
		return e.Prefix
	case e.Type == TypeZK:
		return zk.DefaultPrefix
	}
	return "orthrus" // the redis, redlock, etcd and postgres engines' default
}

// ForDrill returns a copy of c whose engines keep their keys and nodes
// under drill-only prefixes: each engine's prefix becomes a sibling of it,
// "<prefix>-lockctl-drill-<id>", so that a drill's keys and nodes never
// mix with the application's (none of the application's key ranges or
// nodes contains them) and can all be removed afterwards, while
// prefix-based permissions (Redis ACL key patterns, etcd RBAC prefixes)
// that cover "<prefix>*" still allow them. A file source of the copy reads
// the file again through the same prefixes. id is 1 to 32 lower-case
// letters and digits. lockctl drill is built on it.
func (c *Config) ForDrill(id string) (*Config, error) {
	if !drillID.MatchString(id) {
		return nil, fmt.Errorf("config: ForDrill: %w: drill id %q: want 1 to 32 lower-case letters and digits", locker.ErrInvalidArgument, id)
	}
	d := c.clone()
	d.drill = id
	for i := range d.Engines {
		d.Engines[i].Prefix = enginePrefix(&d.Engines[i]) + drillMark + id
	}
	return d, nil
}
