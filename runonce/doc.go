// Package runonce runs a job at most once across a fleet, with the
// semantics of ShedLock: a process whose turn comes while another holds
// the job's name skips the run (it does not wait), a run keeps the name
// at least AtLeastFor after it started, so that a fast job is not run
// again by a host whose schedule fires a little later, and at most
// AtMostFor, so that a process that dies mid-run blocks the job no
// longer than that.
//
//	r, err := runonce.New(engine, runonce.AtMostFor(10*time.Minute), runonce.AtLeastFor(30*time.Second))
//	defer r.Close() // waits for the AtLeastFor windows still running, then releases them
//	ran, err := r.Run(ctx, "nightly-report", func(ctx context.Context) error { ... })
//
// RunOnce does the same for one run and returns once the name is released.
//
// # Time
//
// No wall clock is compared across hosts, so hosts whose clocks disagree
// cannot run a job twice by that. AtMostFor is the engine's fixed lease
// (locker.WithLease): the server ends the hold by its own clock. AtLeastFor
// is elapsed time measured on the runner's clock (WithClock, the real
// clock's monotonic reading by default) from the grant: the name is
// released no earlier than AtLeastFor after this process saw the grant,
// and so no earlier than AtLeastFor after the job started.
//
// What skewed clocks still change is when each host's schedule fires. A
// job scheduled every P on hosts whose clocks disagree by up to S is run
// once per tick when the name identifies the tick (the job's name plus
// its scheduled time, as each host's schedule reads it) and AtLeastFor is
// longer than S: the first host to fire a tick holds its name until the
// last host has fired it. With one name for every tick, S must stay well
// below P and AtLeastFor between S and P.
//
// # Engines
//
// On Redis, etcd and engines/mem a dead process's hold ends by its lease,
// AtMostFor after the grant. On ZooKeeper a hold lives on the session:
// a dead process's name is free after the session timeout (zk's option),
// whatever AtMostFor says; a live process ends its hold at AtMostFor.
// Through a switcher the hold is pinned on the engine that granted it.
//
// # Metrics
//
// WithObserver reports how each run ended (ran, skipped, failed, cut
// short, error) and how long its job took, to an Observer: package
// telemetry's Telemetry.Jobs exports them to OpenTelemetry.
//
// # Errors
//
// Options that make no sense (a negative duration, AtLeastFor longer than
// AtMostFor) fail with an error wrapping locker.ErrInvalidArgument that
// names the option. An engine that fails the acquisition returns its error
// (wrapping locker.ErrUnavailable): the run did not happen, and did not
// skip either. A run whose hold was lost before it ended (it ran past
// AtMostFor, or the engine lost it) returns an error wrapping
// locker.ErrLockLost; its context ended at the loss.
package runonce
