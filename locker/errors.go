package locker

import (
	"errors"
	"strconv"
	"strings"
)

// Sentinel errors. Engines wrap them with context; match them with errors.Is.
// Contention is never an error: TryLock and TryLockTimeout report it as false.
var (
	// ErrNotHeld is returned by Unlock when the Locker holds nothing.
	ErrNotHeld = errors.New("locker: not held")
	// ErrLockLost is returned when a hold ended without Unlock: its lease ran
	// out, renewal failed past the TTL, the session expired or the key vanished.
	ErrLockLost = errors.New("locker: lock lost")
	// ErrUnavailable means the engine could not be reached or timed out. It is
	// the failure a circuit breaker counts.
	ErrUnavailable = errors.New("locker: engine unavailable")
	// ErrRefused is wrapped, beside ErrUnavailable, when the engine is
	// certainly down rather than slow: the connection was refused or reset,
	// or the client knows it has no connection. A breaker may trip on it at
	// once instead of waiting for several failures.
	ErrRefused = errors.New("locker: engine refused the connection")
	// ErrPermission means the engine refused the caller's identity or
	// rights: bad credentials, or a user whose ACL does not cover the name
	// (another application's namespace). It is a configuration problem, not
	// an outage: a circuit breaker does not count it.
	ErrPermission = errors.New("locker: permission denied")
	// ErrClosed is returned by every call on a closed engine.
	ErrClosed = errors.New("locker: engine closed")
	// ErrInvalidName is returned for a name that is empty, not UTF-8 or longer
	// than driver.MaxNameLen.
	ErrInvalidName = errors.New("locker: invalid lock name")
	// ErrInvalidArgument is returned for a bad option or argument; the message
	// names it.
	ErrInvalidArgument = errors.New("locker: invalid argument")
	// ErrUpgrade is returned at once by the write side of an RWLock whose
	// owner holds only its read side: waiting would deadlock against any
	// other reader doing the same.
	ErrUpgrade = errors.New("locker: read lock held: upgrade to write refused")
	// ErrPermitsMismatch is returned by the first acquisition of a Semaphore
	// opened with a permit count other than the one stored with it.
	ErrPermitsMismatch = errors.New("locker: semaphore permit count differs from the stored one")
)

// EngineError is an engine's failure of one request: the engine, the
// operation, the lock name ("" for a call on the whole engine), the classes
// of the failure (sentinels of this package: ErrUnavailable, ErrRefused,
// ErrPermission, ErrLockLost, ErrClosed) and the cause. errors.Is matches
// every class and the cause; errors.As finds the EngineError.
type EngineError struct {
	Engine  string  // the engine's kind: "redis", "etcd", "zk", "mem"
	Op      string  // "acquire", "release", "renew", "ping", ...
	Name    string  // the lock name, "" when the call concerns no lock
	Classes []error // the sentinels the failure belongs to, most general first
	Err     error   // the cause; nil when the classes say it all
}

// Error reads "redis: acquire "orders/42": locker: engine unavailable: dial
// tcp ...: connection refused".
func (e *EngineError) Error() string {
	var b strings.Builder
	b.WriteString(e.Engine)
	b.WriteString(": ")
	b.WriteString(e.Op)
	if e.Name != "" { // a ping names no lock
		b.WriteString(" ")
		b.WriteString(strconv.Quote(e.Name))
	}
	for _, c := range e.Classes {
		b.WriteString(": ")
		b.WriteString(c.Error())
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap returns the classes and the cause, for errors.Is and errors.As.
func (e *EngineError) Unwrap() []error {
	if e.Err == nil {
		return e.Classes
	}
	return append(e.Classes[:len(e.Classes):len(e.Classes)], e.Err)
}
