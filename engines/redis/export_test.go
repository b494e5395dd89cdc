package redis

import "github.com/orthrus-go/orthrus/locker"

// Channel exposes the wake-up channel of a lock to the tests.
func (e *Engine) Channel(name string) string { return e.keysFor(name).channel }

// FamilyKeys exposes the keys of a read-write lock (writer, readers,
// waiting writers, fence) or a semaphore (holds, count, fence).
func (e *Engine) FamilyKeys(kind locker.Kind, name string) []string { return e.famKeys(kind, name) }

// AcquireSHA is the SHA of the acquire script of a hold of kind.
func AcquireSHA(kind locker.Kind) string {
	switch kind {
	case locker.KindMutex:
		return acquireScript.Hash()
	case locker.KindPermit:
		return semAcquireScript.Hash()
	}
	return rwAcquireScript.Hash()
}

// Parked counts the waiters of this process on the wake-up channel of the
// read-write lock or semaphore name, once the server has confirmed its
// subscription (0 before).
func (e *Engine) Parked(kind locker.Kind, name string) int {
	h := e.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.channels[e.famKeyArray(kind, name)[0]]
	if c == nil || c.confirm == 0 {
		return 0
	}
	n := 0
	for w := c.head; w != nil; w = w.next {
		n++
	}
	return n
}

// RenewSHA is the SHA of the script that renews a chunk of holds.
func RenewSHA() string { return renewScript.Hash() }

// MaxRenew and Split expose how a chunk of holds is cut into renewal calls.
const MaxRenew = maxRenew

var Split = split
