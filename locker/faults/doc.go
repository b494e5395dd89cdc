// Package faults wraps any locker.Engine and makes it misbehave on demand,
// so that tests cover what code around a lock does when the engine fails:
// a handler whose hold is lost mid-work, a service whose switcher fails
// over, a breaker that trips. With engines/mem inside, such tests need no
// server and run in milliseconds; around a real engine they add failures
// that a real server shows only with effort.
//
//	store, _ := mem.NewStore()
//	inner, _ := mem.New(mem.WithStore(store))
//	primary, _ := faults.Wrap(inner, faults.WithName("primary"))
//	defer primary.Close() // closes inner too
//	...
//	primary.Fail() // every call now fails with locker.ErrUnavailable
//	primary.Heal()
//
// # Faults
//
// Each is set and cleared programmatically, at any time, from any
// goroutine; After schedules one on the wrapper's clock.
//
//   - Fail: every call that would reach the server fails at once with an
//     error wrapping locker.ErrUnavailable; Refuse also wraps
//     locker.ErrRefused (the engine is certainly down).
//   - Hang: every such call blocks until its context ends, then fails with
//     an error wrapping locker.ErrUnavailable and ctx.Err() (what
//     a Handle's raw acquisition returns for an engine that did not answer);
//     LockCtx returns ctx.Err() itself, and TryLockTimeout reports the
//     engine's failure, not contention. As on the engines, an acquisition
//     whose context ended less than driver.OutageAfter after it was asked
//     merely ran out of time: it returns ctx.Err() (TryLockTimeout: false,
//     nil). Heal lets hung calls through.
//   - SetLatency: every such call waits first; a context that ends during
//     the wait is judged as a hang's is.
//   - DropRenewals: renewed holds are lost one TTL later.
//   - ExpireNow: the holds of a name end now, as an expiry would.
//
// Calls that reach the server are acquisitions, the last Unlock of a hold,
// renewals and Ping; NewLocker and re-entry stay local, as they do on every
// engine. A fault that starts while an acquisition waits ends that wait as
// the fault says (Fail: an error; Hang: no grant until Heal). While the
// engine fails or hangs, renewals do not get through either: a renewed hold
// outlives an outage shorter than its TTL and is lost one TTL into a longer
// one. An Unlock that does not get through returns the fault's error and
// leaves the hold on the engine until its TTL runs out.
//
// # How losses are simulated
//
// The wrapper keeps its own view of each hold over the inner engine's: it
// counts re-entry, closes Lost, and ends a hold it expires by releasing the
// inner hold, so the name is free on the engine at once, for every other
// engine on the same server. Lost also closes when the inner engine loses
// the hold. Timers (latency, dropped renewals, lingering holds, After) run
// on the wrapper's clock (WithClock); give it the fake clock of a mem.Store
// to drive both with one Advance.
//
// # Closing
//
// The wrapper owns the inner engine. Close ends the holds made through the
// wrapper (Lost closes), fails hung calls with locker.ErrClosed, stops the
// wrapper's timers and goroutines, and closes the inner engine.
package faults
