package idem

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"

	"github.com/orthrus-go/orthrus/locker"
)

// ID is the global identity of an operation: HMAC-SHA-256 of its content,
// keyed with the application key.
type ID [sha256.Size]byte

// String returns the ID in lower-case hex, as stores use it in keys and
// lockctl shows it.
func (id ID) String() string {
	var b [2 * sha256.Size]byte
	hex.Encode(b[:], id[:])
	return string(b[:])
}

// ParseID parses the hex form String returns.
func ParseID(s string) (ID, error) {
	var id ID
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != len(id) {
		return id, fmt.Errorf("%w: id %q: want %d hex digits", locker.ErrInvalidArgument, s, 2*len(id))
	}
	copy(id[:], b)
	return id, nil
}

// Content tags keep a string from hashing like the JSON document it spells.
const (
	tagBytes = 'b'
	tagJSON  = 'j'
)

// Identify derives the ID of content under appKey; Gate.Identify is the
// same with the gate's key. A string or []byte is hashed as its bytes;
// anything else as canonical JSON: encoded with encoding/json, then every
// object's keys sorted at every depth, so a map and a struct with the same
// fields and values give the same ID whatever the field order, and numbers
// keep their exact text.
func Identify(appKey string, content any) (ID, error) {
	if appKey == "" {
		return ID{}, fmt.Errorf("%w: application key is empty", locker.ErrInvalidArgument)
	}
	return newHasher(appKey).identify(content)
}

// hasher is a keyed HMAC with a buffer for the bytes it hashes: a Gate
// pools them, so that an ID costs no allocation for a string or []byte.
type hasher struct {
	mac hash.Hash
	buf []byte
}

func newHasher(appKey string) *hasher {
	return &hasher{mac: hmac.New(sha256.New, []byte(appKey))}
}

// maxKept is the largest buffer a hasher keeps for its next use.
const maxKept = 4 << 10

// identify hashes content with h, fresh or reset, and resets it.
func (h *hasher) identify(content any) (ID, error) {
	var id ID
	switch c := content.(type) {
	case nil:
		return id, fmt.Errorf("%w: content is nil", locker.ErrInvalidArgument)
	case string:
		h.buf = append(append(h.buf[:0], tagBytes), c...)
	case []byte:
		h.buf = append(append(h.buf[:0], tagBytes), c...)
	default:
		doc, err := canonicalJSON(c)
		if err != nil {
			return id, err
		}
		h.buf = append(append(h.buf[:0], tagJSON), doc...)
	}
	h.mac.Write(h.buf)
	copy(id[:], h.mac.Sum(h.buf[:0])) // into buf: id would escape
	h.mac.Reset()
	if cap(h.buf) > maxKept {
		h.buf = nil
	}
	return id, nil
}

// canonicalJSON encodes v, decodes it into generic values (numbers kept as
// their text) and encodes that again: encoding/json writes map keys sorted.
func canonicalJSON(v any) ([]byte, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("%w: content %T cannot be encoded as JSON: %w", locker.ErrInvalidArgument, v, err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var generic any
	if err := dec.Decode(&generic); err != nil {
		return nil, fmt.Errorf("%w: content %T: %w", locker.ErrInvalidArgument, v, err)
	}
	if generic == nil {
		return nil, fmt.Errorf("%w: content %T encodes as JSON null", locker.ErrInvalidArgument, v)
	}
	return json.Marshal(generic)
}
