// Package cluster holds the ride-through drills: a switcher whose primary
// is a 3-member etcd cluster or ZooKeeper ensemble, listed with all its
// members, and Redis as secondary, under a steady load of long holds and
// short cycling locks, while one member of the cluster is killed or frozen.
// A fault that the cluster survives (it keeps its quorum) must be ridden
// out by the engine: no engine switch, no caller error, no hold lost, and
// callers wait no longer than the engine's election bound.
//
// The package has no code of its own: its tests run in parallel with the
// rest of the module's in CI, and its benchmark reports the figures.
//
//	go test -race -count=1 ./e2e/cluster/
//	go test -run '^$' -bench RideThrough -benchtime 5x ./e2e/cluster/
package cluster
