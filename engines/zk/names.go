package zk

import (
	"strings"
	"unicode/utf8"

	"github.com/orthrus-go/orthrus/internal/zkpath"
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
	return r == '/' || r == '%' || !zkpath.LegalRune(r)
}
