// Package zksource is a switcher.Source and switcher.Setter over one
// ZooKeeper node whose data names the engine new acquisitions go to. Every
// process watching the same node follows a Set within the time ZooKeeper
// takes to fire a watch, which is how a whole fleet switches engines at
// once.
//
// # Use
//
//	conn, _, err := gozk.Connect(servers, 10*time.Second)
//	...
//	src, err := zksource.New(conn, "/myapp/orthrus/active")
//	...
//	sw, err := switcher.New(engines, switcher.WithSource(src))
//	...
//	err = src.Set(ctx, "redis-main") // every switcher watching the node follows
//
// The caller owns the connection: the source never closes it. Close the
// switcher (which ends Watch) before the connection.
//
// # Values and epochs
//
// The node's data is an engine name; surrounding white space is ignored and
// empty data is logged and skipped. Watch applies the data it finds at
// start, then every change, with the node's data version plus one as the
// switch epoch (ZooKeeper versions start at 0), so that every process
// reaches the same epoch for the same value. Neither Set nor the source
// checks that the name is one of the switcher's engines: the switcher logs a
// name it does not know and keeps its current engine.
//
// The node need not exist: a switcher whose breaker opens proposes the
// switch from epoch 0, which creates the node (and its parents) at epoch 1
// only if it still does not exist, so the processes of a new fleet follow
// one decision.
// A switcher reads the node (Read) before its first grant, to start at the
// fleet's engine and epoch.
//
// While the node does not exist, Watch waits for it to be created. Deleting
// the node is logged and the switchers keep their current engine. Do not
// delete the node to reset it: a re-created node starts again at version 0,
// so the next switches take their epochs from each process's own counter
// until the version catches up.
//
// # Failures
//
// go-zookeeper re-registers watches after a reconnection within the session;
// after a session expiry or any failed read, Watch reads the node again,
// retrying with exponential backoff capped at 5s. Failures are logged.
// Watch returns nil as soon as its context is done; a request still in
// flight then finishes in the background when ZooKeeper answers or the
// connection gives it up (at the latest when the connection is closed). Set
// creates the node, and its missing parents, when needed; it returns an
// error wrapping locker.ErrUnavailable when ZooKeeper cannot be reached
// within the context.
package zksource
