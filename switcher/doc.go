// Package switcher is the failover facade of orthrus: one locker.Engine over
// ordered engines (primary, secondary, ...) that sends every new
// acquisition to the current engine and changes the current engine when
//
//   - its circuit breaker opens (one sony/gobreaker breaker per engine;
//     only errors wrapping locker.ErrUnavailable count, never contention or
//     a caller's cancellation), to the next engine whose breaker is not open;
//   - a watched Source (a configuration key) names another engine;
//   - an operator calls SwitchEngine or SwitchEngineTo;
//   - with WithFailback, the primary has been healthy for the set period.
//
// Every engine is pinged through its breaker (WithHealthCheck), so a dead
// engine trips without traffic and a revived one closes again. Every switch
// is logged with slog and delivered to the OnSwitch hook as an Event.
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
// or ZooKeeper node, whose version is the epoch); switches by breaker or by
// hand raise only the local epoch. Tokens of one epoch from two engines are
// not comparable.
//
// Those who prefer safety to availability set WithSafeSwitch: for a window
// after each switch, the new engine grants a name only after taking and
// releasing it on the previous engine, or, when that engine does not
// answer, once the window (the longest TTL in use) has passed.
//
// Close stops the switcher's goroutines and closes the engines it was given.
package switcher
