package redis

// ACLCommands are the commands an application's Redis ACL user needs for
// this engine, as ACL SETUSER accepts them after '+': those the engine
// sends and those its Lua scripts run (Redis checks both). Give the user
// its keys and channels too, for example
//
//	ACL SETUSER app1 on >secret ~app1:* &app1:* -@all +evalsha +eval ...
//
// with WithPrefix("app1"): every key and channel of the engine starts with
// "<prefix>:". With Cluster add "cluster|slots", "cluster|shards" and
// "readonly"; on Redis 7.2 and later add "client|setinfo", which go-redis
// sends when it connects.
const ACLCommands = "ping hello auth " +
	"evalsha eval script|load " + // the scripts
	"exists get incr set time hset hmget pexpire pexpireat pttl del publish spublish " + // inside them, and Inspect
	"zadd zrem zscore zrange zremrangebyscore " + // the read-write lock and the semaphore
	"subscribe unsubscribe ssubscribe sunsubscribe pubsub|numsub pubsub|shardnumsub" // waiters, Inspect
