package inspect

import "strconv"

// Kind is what a Hold holds.
type Kind uint8

const (
	// KindMutex is an exclusive lock (NewLocker).
	KindMutex Kind = iota
	// KindRead is the shared side of a read-write lock: it excludes
	// writers, not other readers.
	KindRead
	// KindWrite is the exclusive side of a read-write lock: it excludes
	// readers and writers of the name.
	KindWrite
	// KindPermit is Hold.Permits permits of a semaphore of Hold.Limit.
	KindPermit
)

func (k Kind) String() string {
	switch k {
	case KindMutex:
		return "mutex"
	case KindRead:
		return "read"
	case KindWrite:
		return "write"
	case KindPermit:
		return "permit"
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}
