// Package mem is an in-process lock engine for tests: the full locker
// contract — re-entry, TTLs renewed by the watchdog, fixed leases, FIFO
// queues with fencing tokens, wake-up by notification, Lost, Inspect and
// ForceUnlock — with no server. Application tests use it to check what their
// code does around a lock in milliseconds; wrapped in package locker/faults
// it fails, hangs and loses holds on demand, and a switcher over such
// engines fails over without a server in sight.
//
// # Use
//
//	clock := clockwork.NewFakeClock()
//	store, err := mem.NewStore(mem.WithClock(clock))
//	...
//	hostA, err := mem.New(mem.WithStore(store), mem.WithName("host-a"))
//	hostB, err := mem.New(mem.WithStore(store), mem.WithName("host-b"))
//	defer hostA.Close()
//	defer hostB.Close()
//
// A Store is one simulated server: engines given the same Store exclude
// each other as processes on several hosts do over one Redis; an engine
// without WithStore has a store of its own. Close every engine: Close
// releases its holds (their Lost channels close) and makes its waiting
// acquisitions return ErrClosed. A Store starts nothing and needs no
// closing.
//
// # Guarantees
//
//   - Mutual exclusion within a store (and prefix, WithPrefix), across
//     goroutines and engines.
//   - FIFO: a lock is one queue of holds and waiters, granted by the lock
//     family's rule (internal/lockrule); a waiter gets its token when it
//     queues, or when it is granted if an older one is still waiting, so
//     tokens increase with every grant. TryLock never jumps it.
//   - Weights (locker.WithWeight): the heaviest waiter is granted first,
//     FIFO within a weight; a holder keeps its hold whatever comes, and
//     TryLock ranks as weight 1, behind every waiter. Nothing ages a
//     waiter: a steady stream of heavier waiters starves lighter ones.
//   - Fencing: tokens come from one counter per store, so they increase with
//     every grant of every name, and compare across the engines of a store;
//     tokens of two stores do not compare.
//   - Wake-up: a release hands the lock straight to the first-ranked
//     waiter, which is the only one woken. No polling, no herd.
//   - Cancellation: a waiter that gives up leaves the queue at once.
//
// # Time
//
// The store expires holds by its clock (WithClock, the real clock by
// default), as a server expires keys by its own: a hold lives its TTL from
// its grant or its last renewal. With a clockwork.FakeClock, advancing the
// clock by a TTL or more ends the holds of that TTL at once, as if their
// renewals had not come in time, and ends the fixed leases that run out:
// their Lost channels close (from the clock's timer goroutine, so wait on
// them) and the next waiters are granted, without a test sleeping.
//
// The locker machinery above every engine (driver.Core) runs on real time:
// the watchdog renews a hold every TTL/3 of real time, extending it by its
// TTL from the store's now, and a fixed lease also ends its TTL of real time
// after its grant, whichever clock gets there first. A TTL or lease below
// MinTTL (10ms) is refused with an error naming the option.
//
// # Not simulated
//
// The engine never fails: Ping answers unless the engine is closed. Package
// locker/faults wraps any engine, this one included, to make calls fail or
// hang, add latency, drop renewals and expire holds.
package mem
