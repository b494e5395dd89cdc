package etcd

import (
	"time"

	"github.com/orthrus-go/orthrus/locker/inspect"
)

// LockPrefix exposes the key range of a lock name to the tests.
func (e *Engine) LockPrefix(name string) string { return e.lockPrefix(name) }

// FamilyRange exposes the key range of a read-write lock or semaphore name
// to the tests.
func (e *Engine) FamilyRange(k inspect.Kind, name string) string { return e.familyRange(k, name) }

// MarkDepth exposes the queue length from which waiters mark their keys.
const MarkDepth = markDepth

// InterruptGoneWatch ends the deletion watch, as etcd might, and keeps it
// down until resume is called: then it resumes after the revision it had
// delivered.
func (e *Engine) InterruptGoneWatch() (resume func()) {
	gate := make(chan struct{})
	e.mu.Lock()
	e.gone.gate = gate
	e.mu.Unlock()
	e.gone.interrupt <- struct{}{}
	return func() {
		e.mu.Lock()
		e.gone.gate = nil
		e.mu.Unlock()
		close(gate)
	}
}

// GoneWatch tells how many deletion watches the engine opened, and
// whether one runs now.
func (e *Engine) GoneWatch() (opened int, watching bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.gone.opened, e.gone.watching
}

// SetGoneAfter sets how long a hold lives before the deletion watch runs
// (default 10ms); before the engine's first hold.
func (e *Engine) SetGoneAfter(d time.Duration) { e.gone.after = d }

// RWWait exposes, by kind, the sub-ranges a read-write lock key waits on,
// as derived from lockrule.
var RWWait = rwWait

// AfterLook sets f as what a heavy arrival calls between its read of the
// queue and its create.
func (e *Engine) AfterLook(f func()) { e.afterLook = f }

// HeavyTries returns the creates heavy arrivals sent, and how many
// created their key.
func (e *Engine) HeavyTries() (tries, arrivals int64) {
	return e.heavyTries.Load(), e.heavyArrivals.Load()
}
