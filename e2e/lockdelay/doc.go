// Package lockdelay holds the end-to-end test of locker.WithLockDelay: a
// holder's process is killed, and the next grant must wait out the hold's
// TTL (ZooKeeper: its session timeout) and the delay, and no more than a
// second longer, on Redis, etcd, ZooKeeper and through the switcher. It
// has no code of its own.
package lockdelay
