// Package testserver starts real Redis, ZooKeeper, etcd and PostgreSQL
// servers for tests, in the spirit of net/http/httptest.
//
// Every server is a child process of the test binary, listening on a free
// loopback port and keeping its data and log in a temporary directory. The
// children are started with a parent-death signal (SIGKILL on Linux), so
// nothing outlives the test process even if it is killed. Stop reaps the
// process and leaves no goroutine behind, so packages can use
// go.uber.org/goleak in TestMain.
//
// The binaries come from Debian packages: redis-server, etcd-server,
// zookeeper (run with /usr/bin/java) and postgresql (initdb and postgres,
// run as the postgres user when the tests run as root). The testing wrappers (Redis, ZooKeeper,
// Etcd, ...) skip the test with the apt-get command to run when a binary is
// missing, except when CI=true, where a missing binary fails the test. The
// constructors (NewRedis, NewZooKeeper, NewEtcd, ...) return an error wrapping
// ErrNotInstalled instead and are meant for TestMain; their caller must Stop
// what they return.
//
// Servers can be crashed (Kill), frozen (Pause/Resume) and brought back on the
// same port with the same data (Restart), which is what failure tests of a
// distributed lock need. Cluster.Leader and Cluster.WaitLeader find the
// leader of a ZooKeeper ensemble or an etcd cluster.
//
// ZooKeeper runs with tickTime=200ms and minSessionTimeout=500ms, so tests
// can use session timeouts of about a second. etcd runs with a 100ms
// heartbeat and a 1s election timeout; a cluster's members also with
// pre-vote, as etcd 3.5 and later do by default (Debian's etcd 3.4 does
// not), so that a member rejoining after a restart does not depose a
// leader that works. Redis Cluster nodes use a 1s
// cluster-node-timeout; WithReplicas gives each master replicas, which take
// over a master that dies.
package testserver
