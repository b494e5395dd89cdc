package idem

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"time"
)

// State is the state of an operation's record.
type State uint8

const (
	// Running: an attempt began and has not reported its outcome; the record
	// frees itself after the gate's expiry if the attempt never does.
	Running State = iota + 1
	// Succeeded: an attempt succeeded; the record stays for the retention.
	Succeeded
)

func (s State) String() string {
	switch s {
	case Running:
		return "running"
	case Succeeded:
		return "succeeded"
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// Record is an operation's record as a store keeps it.
type Record struct {
	State State
	// Token identifies the attempt that wrote the record.
	Token [16]byte
	// Begun is when that attempt began, by its process's clock.
	Begun time.Time
	// Fingerprint is what the attempt was begun with (WithFingerprint); nil
	// without one.
	Fingerprint []byte
	// Result is what a successful attempt stored with Succeed; nil without.
	Result []byte
}

// Encoding, version 1: version, state, token[16], begun (Unix ms, int64
// big-endian), fingerprint length, fingerprint, result (the rest). Stores
// compare the encoded bytes to check that a record is still an attempt's.
const (
	recordVersion = 1
	headerLen     = 1 + 1 + 16 + 8 + 1
	// MaxFingerprint is the longest fingerprint WithFingerprint accepts.
	MaxFingerprint = 255
)

func newToken() [16]byte {
	var t [16]byte
	_, _ = rand.Read(t[:]) // crypto/rand.Read never fails on Linux since Go 1.24.
	return t
}

// encode appends the encoding of r to dst.
func (r *Record) encode(dst []byte) []byte {
	dst = append(dst, recordVersion, byte(r.State))
	dst = append(dst, r.Token[:]...)
	dst = binary.BigEndian.AppendUint64(dst, uint64(r.Begun.UnixMilli()))
	dst = append(dst, byte(len(r.Fingerprint)))
	dst = append(dst, r.Fingerprint...)
	return append(dst, r.Result...)
}

// DecodeRecord decodes a record's value as a store holds it, for operator
// tools (lockctl idem lookup).
func DecodeRecord(b []byte) (Record, error) {
	var r Record
	if len(b) < headerLen || b[0] != recordVersion {
		return r, fmt.Errorf("idem: not an idempotency record (%d bytes)", len(b))
	}
	r.State = State(b[1])
	if r.State != Running && r.State != Succeeded {
		return r, fmt.Errorf("idem: record has unknown state %d", b[1])
	}
	copy(r.Token[:], b[2:18])
	r.Begun = time.UnixMilli(int64(binary.BigEndian.Uint64(b[18:26])))
	n := int(b[26])
	rest := b[headerLen:]
	if len(rest) < n {
		return r, fmt.Errorf("idem: record truncated in its fingerprint")
	}
	if n > 0 {
		r.Fingerprint = rest[:n:n]
	}
	if len(rest) > n {
		r.Result = rest[n:]
	}
	return r, nil
}
