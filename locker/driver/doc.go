// Package driver is the API of engine authors: what an engine of package
// locker is built from. Users call package locker; they need this package
// only for its defaults (DefaultTTL, DefaultReleaseWait, ...).
//
// An engine implements Backend (Acquire and Release of a Hold), and
// Renewer if its holds expire unless renewed, Expirer if a hold's end by
// its lease must keep the lock delay, DeadlineHonourer if its client
// honours a context's deadline, MinTTLer if it cannot keep a short
// TTL, and Weigher if it ranks waiters by Hold.Weight (Core refuses a
// weight above 1 to the others). It builds its Lockers, read-write locks and semaphores with a Core
// (NewCore), which owns everything else once for every engine: owner IDs,
// option resolution (Resolve, ResolveFor), name validation
// (ValidateName), the one Handle of locker.NewHandle with its re-entry
// and context contract, the renewal scheduler (chunks of holds falling
// due together), lost-hold signalling, releases that never hold their
// caller on a frozen engine, background work (Core.Go) and observation
// (ObservedBy, package observe). A Hold's Kind (package inspect) says
// whether it is a mutex, a side of a read-write lock or semaphore
// permits.
//
// The lock delay is written here once: Core gives each hold its Delay,
// and engines whose holds expire on the server keep them there for
// Hold.Life (TTL + delay), renewing to Life, while Core loses them at
// their TTL; a release deletes them at once.
//
// Wrappers of engines (the switcher, package faults) validate and resolve
// with ValidateName and ResolveFor, and take their inner holds with
// locker.Take. Package lockertest is the conformance suite an engine must
// pass.
package driver
