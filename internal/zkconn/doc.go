// Package zkconn is orthrus's one ZooKeeper connection layer, over
// github.com/go-zookeeper/zk: the zk engine, the zk switch source and the
// configuration tools reach ZooKeeper through it.
//
// It adds what go-zookeeper leaves to its callers: a bounded Dial (TLS,
// credentials, a server that is not ZooKeeper refused at once);
// requests that a context can abandon and that are sent again after a
// dropped connection (Do, and Retryable, the one list of final errors);
// epochs, the stretches of a session whose ephemeral nodes are trusted;
// protected creates, the reaper of abandoned nodes and the sweeper of
// empty parents; the one rule set for paths (CheckPath, EscapeName); and
// a Close that waits for every goroutine, go-zookeeper's included.
//
// Call, for a connection the caller owns, waits one attempt within its
// context; a request it abandons ends when ZooKeeper answers or the caller
// closes the connection, not before.
package zkconn
