// Package inspect is what an operator reads of a lock and forces: a
// mutex's holder and waiters (Inspector: Inspect, ForceUnlock), and the
// holders, waiters and stored permit count of a read-write lock or a
// semaphore (FamilyInspector: InspectFamily, SetPermits,
// ForceUnlockFamily). Every engine of this module and the switcher
// implement both; lockctl's holders, unlock and permits commands and
// package elect's CurrentLeader use them. Kind says what a hold holds.
//
// It imports nothing of this module, so that package locker's engines,
// package driver and package observe can all name a Kind.
package inspect
