package zkconn

import (
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// CheckPath is the one rule set for the ZooKeeper paths orthrus is given
// (an engine's prefix, a switch source's node), so that configuration
// accepts exactly what the engine and the source accept: an absolute path
// below the root, outside /zookeeper (the server's own), of non-empty
// segments other than "." and "..", in UTF-8, of characters ZooKeeper
// accepts, without a trailing '/'.
func CheckPath(p string) error {
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
//
// ZooKeeper (PathUtils.validatePath) checks UTF-16 code units: it rejects
// U+0001-U+001F, U+007F-U+009F, U+D800-U+F8FF (so every character beyond
// U+FFFF, written as surrogates) and U+FFF0-U+FFFF.
func LegalRune(r rune) bool {
	switch {
	case r == 0, r <= 0x1f, r >= 0x7f && r <= 0x9f, r >= 0xd800 && r <= 0xf8ff, r >= 0xfff0:
		return false
	}
	return true
}

// EscapeName maps any string to one legal node name, injectively: '%',
// '/' and every character ZooKeeper rejects in a path are percent-encoded,
// byte by byte of their UTF-8 form, and so are the dots of the names "."
// and "..". Decoding "%XX" back gives the string, so two strings never
// share a node.
func EscapeName(name string) string {
	if name == "." || name == ".." {
		return strings.Repeat("%2E", len(name))
	}
	if strings.IndexFunc(name, needsEscape) < 0 {
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
	return r == '/' || r == '%' || !LegalRune(r)
}

// Ancestors returns the paths above p, shallowest first: "/a" and "/a/b"
// for "/a/b/c".
func Ancestors(p string) []string {
	var out []string
	for i := 1; i < len(p); i++ {
		if p[i] == '/' {
			out = append(out, p[:i])
		}
	}
	return out
}

// Protected nodes are named like Curator's protected ephemeral nodes:
// "_c_<guid>" and the rest of the name. The guid, new for every node, lets
// its creator find it after a create whose reply was lost.
const (
	ProtectedPrefix = "_c_"
	GUIDLen         = 32
)

// NewGUID returns a fresh guid for a protected node.
func NewGUID() string {
	var b [GUIDLen / 2]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on Linux since Go 1.24.
	return hex.EncodeToString(b[:])
}

// SeqDigits is the length of the %010d sequence number ZooKeeper appends
// to a sequential node's name.
const SeqDigits = 10

// Sequence parses the sequence number ZooKeeper appended to a node name.
func Sequence(name string) (int64, bool) {
	if len(name) < SeqDigits {
		return 0, false
	}
	s, err := strconv.ParseInt(name[len(name)-SeqDigits:], 10, 64)
	return s, err == nil && s >= 0
}

// Queue keeps the sequential nodes among names, ordered by sequence, then
// by name: a queue of nodes in the order the server made them.
func Queue(names []string) []string {
	names = slices.DeleteFunc(names, func(n string) bool {
		_, ok := Sequence(n)
		return !ok
	})
	slices.SortFunc(names, func(a, b string) int {
		sa, _ := Sequence(a)
		sb, _ := Sequence(b)
		return cmp.Or(cmp.Compare(sa, sb), strings.Compare(a, b))
	})
	return names
}
