package zk

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// escapeName maps a lock name to one legal ZooKeeper node name, injectively:
// '%', '/' and every character ZooKeeper rejects in a path are
// percent-encoded, byte by byte of their UTF-8 form, and so are the dots of
// the names "." and "..". Decoding "%XX" back gives the name, so two names
// never share a node.
//
// ZooKeeper (PathUtils.validatePath) checks UTF-16 code units: it rejects
// U+0001-U+001F, U+007F-U+009F, U+D800-U+F8FF (so every character beyond
// U+FFFF, written as surrogates) and U+FFF0-U+FFFF.
func escapeName(name string) string {
	if name == "." || name == ".." {
		return strings.Repeat("%2E", len(name))
	}
	clean := true
	for _, r := range name {
		if needsEscape(r) {
			clean = false
			break
		}
	}
	if clean {
		return name
	}
	const hexDigits = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len(name) + 16)
	for i := 0; i < len(name); {
		r, size := utf8.DecodeRuneInString(name[i:])
		if !needsEscape(r) {
			b.WriteString(name[i : i+size])
		} else {
			for _, c := range []byte(name[i : i+size]) {
				b.WriteByte('%')
				b.WriteByte(hexDigits[c>>4])
				b.WriteByte(hexDigits[c&15])
			}
		}
		i += size
	}
	return b.String()
}

// needsEscape reports whether r must be percent-encoded in a node name.
func needsEscape(r rune) bool {
	return r == '/' || r == '%' || !legalRune(r)
}

// legalRune reports whether ZooKeeper accepts r in a path.
func legalRune(r rune) bool {
	switch {
	case r <= 0x1f, r >= 0x7f && r <= 0x9f, r >= 0xd800 && r <= 0xf8ff, r >= 0xfff0:
		return false
	}
	return true
}

// checkPrefix validates a namespace path as ZooKeeper would, and refuses
// the root and /zookeeper, which the server keeps for itself.
func checkPrefix(p string) error {
	switch {
	case p == "/":
		return errors.New("the root is not a namespace")
	case strings.HasSuffix(p, "/"):
		return errors.New("trailing '/'")
	case !utf8.ValidString(p):
		return errors.New("not UTF-8")
	case p == "/zookeeper" || strings.HasPrefix(p, "/zookeeper/"):
		return errors.New("/zookeeper belongs to the server")
	}
	for _, seg := range strings.Split(p[1:], "/") {
		switch seg {
		case "":
			return errors.New("empty path element")
		case ".", "..":
			return errors.New("relative path element " + seg)
		}
		for _, r := range seg {
			if !legalRune(r) {
				return fmt.Errorf("ZooKeeper rejects the character %U", r)
			}
		}
	}
	return nil
}
