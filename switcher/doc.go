// Package switcher is the failover facade of orthrus: one locker.Engine over
// ordered engines (primary, secondary, ...) that sends every new
// acquisition to the current engine and changes the current engine when
//
//   - its circuit breaker opens (one sony/gobreaker breaker per engine;
//     only errors wrapping locker.ErrUnavailable count, never contention or
//     a caller's cancellation, nor a request its caller's deadline cut short
//     before it had gone unanswered for driver.OutageAfter), to the next engine whose
//     breaker is not open;
//   - a watched Source (a configuration key) names another engine;
//   - an operator calls SwitchEngine or SwitchEngineTo;
//   - with WithFailback, the primary has been healthy for the set period.
//
// Every engine is pinged through its breaker (WithHealthCheck, every 100ms
// with a 300ms timeout by default), so a dead engine trips without traffic
// and a revived one closes again. A failure that wraps locker.ErrRefused (a
// refused or reset connection: the engine is certainly down) opens the
// breaker at once; other failures open it after WithBreaker's count (3),
// but only while another engine's breaker is closed: slow is not dead when
// nothing else is left, and callers keep getting locks from an engine that
// answers late. On a loaded host, pings may take longer than the health
// timeout; raise it (WithHealthCheck) above the slowest ping a healthy
// engine gives there, or a busy host's engines trip in turn.
//
// Unlock never holds its caller on an engine that does not answer: it
// waits at most driver.DefaultReleaseWait (1s), and no longer than the
// engine's breaker stays closed (not at all once it is open), then returns
// an error wrapping locker.ErrUnavailable while the release goes on in the
// background, until the lock's release timeout.
//
// An engine over a cluster (one that implements Cluster: the etcd and zk
// engines given several servers, the redis engine over a Sentinel failover
// client) has a ride-through window: a leader
// election, a member's death or restart are the cluster's business, during
// which requests fail for a moment and are retried (an acquisition goes
// again on the same engine within its caller's budget). Its breaker opens
// only once the engine has failed, without a success, for the whole
// window — a refusal included, since a ZooKeeper ensemble refuses clients
// while it elects. Defaults: etcd 5s (two election rounds of up to 2s + 1s),
// ZooKeeper two thirds of the session timeout, 6.67s (see each engine's
// doc); an engine over one server has no window. A cluster that is really
// down switches within the window plus a health check.
//
// A breaker that opens is logged (WARN) with the last failure it counted.
// Every switch is logged with slog and delivered to the OnSwitch hook as
// an Event. All switching decisions are made by one goroutine, in order.
// The hook runs asynchronously, on a goroutine of its own, in the order of
// the switches: SwitchEngine and the breaker do not wait for it, so a test
// that checks what the hook did calls WaitEvents first, which returns once
// the hook has returned from every event emitted before the call.
//
// # A fleet
//
// A Source that implements Proposer (etcdsource, zksource: a key or node
// shared by every process) is the single truth for the fleet:
//
//   - a breaker switch needs the fleet's evidence: a process whose breaker
//     opens announces the engines it sees down (Member.Down) and counts the
//     live processes' announcements (Roster); only when a quorum sees the
//     engine down (WithQuorum, default a majority; a fleet of one decides
//     alone) does it propose the switch. Each process announces before it
//     counts, so in a whole-engine outage the last to count sees every vote.
//     A process alone in seeing it down (a link, a pause, a starved CPU of
//     its own) stays and waits (WithIsolation: IsolationWait), or moves alone
//     at the fleet's epoch (IsolationAlone); it rejoins when its breaker
//     closes;
//   - a breaker switch is proposed through it by compare-and-swap on the
//     version the process follows; one proposal wins, every process
//     follows the source's watch (milliseconds), and the switch epoch is the
//     source's version, so tokens compare across processes;
//   - a key or node that was never written (every new fleet) is created by
//     the first proposal, by compare-and-swap on its absence: the fleet
//     moves as one from its first failover, at epoch 1;
//   - every process on the engine the source names has the source's
//     version as its epoch, whether it switched there or was already
//     there; a process that starts or restarts reads the source before its
//     first grant (acquisitions wait for that read, at most the health
//     timeout and never past their own budget), so it grants on the fleet's
//     engine at the fleet's epoch. An epoch never goes backwards in a
//     process: a version lower than the process's epoch does not lower
//     it. Do not delete a fleet's key: its version starts again at 1, and
//     processes started afterwards would have lower epochs than the others;
//   - a process never stays on an engine the source has left, unless its own
//     checks show the named engine down: then it stays where it is, logs a
//     WARN, emits an Event with ReasonDeferred, shows it in States
//     (Desired), and follows as soon as that engine's breaker closes and
//     its health check passes;
//   - when the source does not answer a proposal, the process switches
//     alone, at the epoch the proposal would have had (so processes that
//     decide alone from the same value still agree), and proposes again until
//     the source answers; a value written meanwhile by someone else wins.
//     One that does not answer at start leaves the process on its start
//     engine at epoch 0 until the watch delivers a value;
//   - with WithFailback, failback is proposed the same way.
//
// Put the source where the primary's failure cannot take it: on the
// secondary engine's cluster or on a separate etcd or ZooKeeper ensemble,
// never on the primary. If the source fails with the primary, processes
// switch alone (above) and converge when it returns. Shared sources that
// implement Announcer also list every process (Roster), which lockctl status
// shows.
//
// Without a shared source (no source, or a file source) each process
// decides alone: processes may switch at different moments, so a fleet can
// run on two engines for a while. Use a shared source for a fleet.
//
// # Epochs never go backwards
//
// Every engine that implements EpochRecord (all of orthrus's) keeps a
// record of the epoch per switcher name. A process starts at the highest
// epoch recorded on the engines that answer within the health timeout,
// agrees its epoch with an engine's record before its first grant there
// (adopting a higher record, raising a lower one), and reads the record of
// its current engine every fifth health check; a switch always raises the
// epoch above the process's own. So every process on an engine grants at
// the highest epoch used there — restarted and added processes, fleets on
// a file source or none, and fleets moved to a new shared source whose
// versions start again at 1 (the record outranks them).
//
// # Holds stay where they were granted
//
// An outermost acquisition goes to the engine current at that moment and
// the hold is pinned there: re-entry, renewal and Unlock go to the granting
// engine after any number of switches. Nothing is migrated. An acquisition
// that fails because its engine died is retried on the new current engine
// within the caller's wait budget, so Lock, LockCtx and TryLockTimeout
// callers see a lock, not an error, as long as some engine works.
//
// A lock delay (locker.WithLockDelay) is passed to the granting engine: a
// hold that ends there without Unlock bars the name on that engine. It
// does not bar the name on another engine, to which a switch sends the
// next acquisition; the switch window below is the same with or without a
// delay.
//
// # The switch window
//
// Right after a switch, a name can be held twice: once on the old engine
// by a holder from before the switch, once on the new engine. Fencing
// tokens order them: a switcher token is the switch epoch shifted left by
// 44 bits, plus the engine's token (engine tokens stay below 2^44). Every
// switch raises the epoch, so every token granted after a switch is higher
// than every token granted before it, on any engine. A resource that refuses
// a token lower than the highest it has seen therefore refuses the stale
// holder once the new holder has written. The guarantee is fleet-wide only
// when every process takes its epoch from one shared Source (an etcd key
// or ZooKeeper node, whose version is the epoch); switches by hand
// (SwitchEngine, SwitchEngineTo) raise only the local epoch. Tokens of one
// epoch from two engines are not comparable; that happens only when
// processes decided alone, with the source unreachable, and then chose
// different engines.
//
// Those who prefer safety to availability set WithSafeSwitch: for a window
// after each switch, the new engine grants a name only after taking and
// releasing it on the previous engine, or, when that engine does not
// answer, once the window (the longest TTL in use) has passed.
//
// Close stops the switcher's goroutines and closes the engines it was given.
package switcher
