// Package zkconn is orthrus's one ZooKeeper connection layer, over
// github.com/go-zookeeper/zk: the zk engine, the zk switch source and the
// configuration tools reach ZooKeeper through it.
//
// Guaranteed:
//   - Dial waits for a session at most the connect timeout (and its
//     context). A server that accepts a connection but does not answer the
//     handshake is left for the next one; TLS handshakes are bounded too.
//     One whose first reply cannot be a connect response (a wrong port, a
//     protocol that speaks first) is refused at once, as not a ZooKeeper
//     server.
//     Credentials are added before Dial returns.
//   - Do runs a go-zookeeper request, which takes no context, on a worker of
//     the connection: the caller stops waiting when its context is done,
//     and a request that failed for a dropped connection is tried again,
//     within the connect timeout. Retryable is the one list of errors that
//     another attempt would not change.
//   - Epochs: a stretch of one session during which its ephemeral nodes are
//     trusted. An epoch ends when the session expires, and when the
//     ensemble has been silent for the session timeout (the server may have
//     expired it unseen).
//   - CheckPath is the one rule set for configured paths; EscapeName maps
//     any string to one legal node name.
//   - Close ends the session and waits for every goroutine the connection
//     started, go-zookeeper's included, at most about ten seconds; requests
//     in flight fail with ErrClosed.
//
// Not guaranteed: Call, for a connection the caller owns, waits one attempt
// within its context; an abandoned request ends when ZooKeeper answers or
// the caller closes the connection, not before.
package zkconn
