// Package elect elects one leader among candidates, over any engine of
// this module or a switcher, in the manner of Curator's LeaderLatch and
// etcd's concurrency.Election.
//
//	c, err := elect.New(engine, "billing-leader", elect.WithValue("10.0.0.5:8080"))
//	lctx, err := c.Campaign(ctx) // blocks until this candidate leads
//	... lead until lctx ends (the leadership was lost), fencing writes with c.Token()
//	err = c.Resign()
//
// The leadership is a lock on the election's name, held with the
// candidate's owner ID (host:pid:random/value) and renewed as any hold:
// a leader that dies, freezes or loses the engine is replaced within
// about its TTL (WithTTL; on ZooKeeper, the session timeout). The
// leadership context ends when the hold is lost (cause wrapping
// locker.ErrLockLost) or on Resign; a leader that cannot stop at once must
// fence what it writes with Token, since a frozen leader learns of its
// loss only when it thaws.
//
// CurrentLeader and Observe read the leader through the engine's
// inspection (inspect.Inspector): its owner ID, host, pid, published value,
// token and engine. Observe looks at intervals: it reports changes in
// order, but may miss a leadership shorter than its interval.
//
// # Across an engine switch
//
// A switcher pins each hold on the engine that granted it, so after a
// switch the leader keeps leading on the old engine while new campaigns go
// to the new one. A candidate therefore leads only once no other engine of
// the switcher has a holder of the name: after winning on the current
// engine it looks at the others (Inspect), and if one holds the name it
// steps back, waits on that engine until the hold there ends (the engine
// wakes it), and campaigns again. So the old leader keeps the leadership
// until it resigns or loses it, and only then does the fleet elect a
// leader on the new engine. Two candidates that win on two engines at once
// both look after winning, so at least one sees the other and steps back.
// An engine that does not answer counts as holding the name for a TTL from
// the first time it did not answer: a leader cut off from it loses its
// hold by then. The fencing token through a switcher carries the switch
// epoch in its high part, so the new engine's leader has a higher token
// than the old engine's.
//
// # Metrics
//
// WithObserver reports each campaign's result and wait, and each
// leadership's end (resigned or lost) and length, to an Observer:
// package telemetry's Telemetry.Jobs exports them to OpenTelemetry. A
// candidate with an observer watches its leadership on one goroutine,
// which ends with the leadership.
//
// # Errors
//
// Campaign returns ctx.Err() when ctx ends first, and an error wrapping
// locker.ErrInvalidArgument when the candidate already campaigns or
// leads. Resign without the leadership returns an error wrapping
// locker.ErrNotHeld.
package elect
