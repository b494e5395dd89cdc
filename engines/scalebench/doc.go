// Package scalebench holds no code: its benchmark, BenchmarkScale, measures
// each engine holding many locks at once in one process, against a fresh
// server per run:
//
//	SCALE_N=100000 SCALE_TTL=3s SCALE_HOLD=60s \
//	  go test -run '^$' -bench Scale -benchtime 1x -timeout 60m ./engines/scalebench
//
// For each engine (SCALE_ENGINES, default "redis,etcd,zk"; postgres too)
// and each N (SCALE_N, a comma-separated list, default 10000) it reports
// the acquire rate (N distinct names, 16 at a time), the heap per hold, the CPU the
// steady renewal costs the client (this process) and the server (its
// processes, from /proc) as % of one core, the Lock+Unlock p50 and p99 of
// a new name with none held and while the N are held (and their ratio),
// how many holds were lost over SCALE_HOLD (default 10s), and for
// ZooKeeper how long the lock's parent nodes took to go after the release.
// The TTL (SCALE_TTL, default 3s) does not apply to ZooKeeper, whose holds
// live with its session. SCALE_PROFILE=file writes a CPU profile of this
// process over the steady renewal window.
//
// Each latency times SCALE_PROBES pairs (default 1000; more span more of
// the renewal period). On a machine busy with other work the p99s move
// with it: with SCALE_CONTROL=true a second fresh server, with nothing
// held, is probed in turn with the loaded one, and p99/ctl-p99 compares
// the two, which saw the same machine at the same moments.
package scalebench
