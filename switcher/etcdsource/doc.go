// Package etcdsource is a switcher.Source and switcher.Setter over one etcd
// key whose value names the engine new acquisitions go to. Every process
// watching the same key follows a Set within the time etcd takes to deliver
// a watch event, which is how a whole fleet switches engines at once.
//
// # Use
//
//	src, err := etcdsource.New(client, "/myapp/orthrus/active")
//	...
//	sw, err := switcher.New(engines, switcher.WithSource(src))
//	...
//	err = src.Set(ctx, "zk-backup") // every switcher watching the key follows
//
// The caller owns the client: the source never closes it. Close the
// switcher (which ends Watch) before the client.
//
// # Values and epochs
//
// The key's value is an engine name; surrounding white space is ignored and
// an empty value is logged and skipped. Watch applies the value it finds at
// start, then every PUT, with the key's Version as the switch epoch, so
// that every process reaches the same epoch for the same value (see the
// switcher package on fencing tokens across a switch). Neither Set nor the
// source checks that the name is one of the switcher's engines: the
// switcher logs a name it does not know and keeps its current engine.
//
// The key need not exist: a switcher whose breaker opens proposes the
// switch from epoch 0, which creates the key at Version 1 only if it still
// does not exist, so the processes of a new fleet follow one decision.
// A switcher reads the key (Read) before its first grant, to start at the
// fleet's engine and epoch.
//
// A DELETE of the key is logged and ignored: the switchers keep their
// current engine. Do not delete the key to reset it: a re-created key starts
// again at Version 1, lower than the epoch the switchers have reached, so
// the next switches take their epochs from each process's own counter until
// the Version catches up.
//
// # Failures
//
// Watch survives etcd restarts, leader loss and compaction: when the watch
// fails or is compacted, it reads the key again and watches from there,
// retrying with exponential backoff capped at 5s, each read bounded by 5s.
// Failures are logged. Watch returns nil once its context is done, after its
// watcher has been closed. Set returns an error wrapping
// locker.ErrUnavailable when etcd cannot be reached within the context.
package etcdsource
