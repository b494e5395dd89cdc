// Package zkpath holds the one rule set for the ZooKeeper paths that
// orthrus is given (an engine's prefix, a switch source's node), so that
// configuration accepts exactly what the engine and the source accept.
package zkpath

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// Check accepts an absolute path below the root, outside /zookeeper (the
// server's own), of non-empty segments other than "." and "..", in UTF-8,
// of characters ZooKeeper accepts, without a trailing '/'.
func Check(p string) error {
	switch {
	case !strings.HasPrefix(p, "/"):
		return errors.New("want an absolute path starting with '/'")
	case p == "/":
		return errors.New("want a path below the root")
	case strings.HasSuffix(p, "/"):
		return errors.New("trailing '/'")
	case !utf8.ValidString(p):
		return errors.New("not UTF-8")
	case p == "/zookeeper" || strings.HasPrefix(p, "/zookeeper/"):
		return errors.New("/zookeeper is reserved for the server")
	}
	for _, seg := range strings.Split(p[1:], "/") {
		switch seg {
		case "":
			return errors.New("empty path segment ('//')")
		case ".", "..":
			return fmt.Errorf("relative segment %q", seg)
		}
		for _, r := range seg {
			if !LegalRune(r) {
				return fmt.Errorf("ZooKeeper rejects the character %U", r)
			}
		}
	}
	return nil
}

// LegalRune reports whether ZooKeeper accepts r in a path.
func LegalRune(r rune) bool {
	switch {
	case r == 0, r <= 0x1f, r >= 0x7f && r <= 0x9f, r >= 0xd800 && r <= 0xf8ff, r >= 0xfff0:
		return false
	}
	return true
}
