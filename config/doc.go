// Package config turns a configuration file into a running orthrus
// switcher: engines in order, breakers, health checks, failback, the lock
// defaults, and the watched key that names the active engine.
//
//	cfg, err := config.Load("/etc/myapp/orthrus.yaml") // parse, environment overrides, validate
//	...
//	sw, err := config.Open(ctx, cfg) // dial the engines, build the switcher, start the watch
//	...
//	defer sw.Close() // stops everything Open started
//	l, err := sw.NewLocker("orders/42")
//
// # The file
//
// Load reads YAML, TOML or JSON (by the file's extension) with viper. The
// schema is Config; its mapstructure tags are the keys. A minimal file:
//
//	active: redis-main            # default: the first engine
//	engines:                      # order = primary, secondary, ...
//	  - name: redis-main
//	    type: redis               # redis | zk | etcd | postgres | redlock
//	    addrs: ["10.0.0.5:6379"]  # 1 = single node, several = Cluster, + master_name = Sentinel
//	    prefix: myapp/locks
//	    fair: true                # redis: strict FIFO across processes, and weights (default false)
//	  - name: zk-backup
//	    type: zk
//	    servers: ["10.0.0.7:2181"]
//	lock: {ttl: 30s}
//	breaker: {failures: 3, open_timeout: 500ms, outage_wait: 5s}
//	health: {every: 100ms, timeout: 300ms}
//	failback: {after: 5m}         # 0 or left out: manual failback
//	safe_switch: {max_ttl: 30s}   # 0 or left out: off
//	source: {type: file}          # none | file | etcd | zk
//
// A redlock engine takes addrs too: its independent masters, at least 3,
// each with a client of its own, and node_timeout, the bound of each
// request to one node (default 100ms).
//
// examples/configs holds two commented files. Durations are Go duration
// strings ("30s", "1m30s"); a bare number is refused (it would be
// nanoseconds), except 0. A setting left out, or zero, takes its default;
// Load fills the defaults in.
//
// # Validation
//
// Load is strict: an unknown key ("engins", with a suggestion), a value of
// the wrong type, a setting that does not belong to the engine's type
// (servers on a redis engine) and every failed check are reported
// together, each naming its field and what was expected:
//
//	config: /etc/myapp/orthrus.yaml: engines[1].type: unknown engine "rediss" (want redis, zk, etcd, postgres, redlock); lock.ttl: must be positive, got -1s
//
// The error is a *ValidationError of FieldErrors and wraps
// locker.ErrInvalidArgument. A value of the wrong type is reported once,
// beside every other check, not as missing too. Type errors never show the
// value, which may be a secret. TLS files are read by Load, so a missing one is reported there.
//
// # Environment
//
// Every setting can be overridden by an environment variable: ORTHRUS_
// then its key path upper-cased, with every character that is not a letter
// or a digit as '_' (ORTHRUS_ACTIVE, ORTHRUS_LOCK_TTL,
// ORTHRUS_SAFE_SWITCH_MAX_TTL, ORTHRUS_SOURCE_PASSWORD). A setting of an
// engine is ORTHRUS_ENGINES_<NAME>_<KEY>, where NAME is the engine's name
// written the same way: ORTHRUS_ENGINES_REDIS_MAIN_PASSWORD for the
// password of engine "redis-main", ORTHRUS_ENGINES_ZK_BACKUP_AUTH_CREDENTIALS
// for its ZooKeeper credentials. EnvName computes them. Lists are
// comma-separated; empty variables are ignored; an engine's name and type
// cannot be overridden. Two engines whose variables would clash
// ("redis-main" and "redis_main") are a validation error. Keep secrets out
// of the file this way. An ORTHRUS_ variable that matches no setting is an
// error naming it and the closest variable that does: a misspelt secret
// would otherwise go unseen.
//
// # Secrets and TLS
//
// A secret (password, sentinel_password, source.password, auth.credentials)
// comes from the file, from its environment variable, or from the file a
// *_file setting names (password_file, sentinel_password_file,
// auth.credentials_file, source.password_file: a mounted secret, its
// trailing newline dropped), read by Load or, for a Config built in code,
// by Open. Giving one both ways is an error naming the *_file setting.
// Secrets are never logged nor put in an error.
//
// tls applies to redis, redlock, etcd, zk and postgres engines and to the
// etcd source: ca_file (default: the system's roots), cert_file and
// key_file for mutual TLS, server_name. A file that does not exist or does not parse is a
// validation error naming ca_file, cert_file or key_file. A handshake that
// fails at Open is reported with its crypto/tls error. A server or role that
// refuses the credentials makes Open fail with locker.ErrPermission instead
// of ErrUnavailable.
//
// # Open
//
// Open starts the engines in parallel and pings each within start_timeout
// (default 5s), then builds the switcher (switcher.New) with one breaker
// per engine, the health checks, failback and safe switch as configured,
// makes the initial engine current, and starts the watch.
//
// # Degraded start
//
// Open succeeds while some engines are down, so that a rollout or an
// autoscale during an outage starts on the engines that answer. An engine
// that does not answer within start_timeout (refused, hung, TLS handshake
// failing) starts degraded: it is built all the same (go-redis and the etcd
// client connect in the background, a zk engine gets its session whenever
// the ensemble answers), Open logs a WARN naming it and why ("switcher:
// engine down at start"), and its breaker starts open
// (switcher.WithDownAtStart). The health check retries it once
// breaker.open_timeout has passed and closes its breaker when it answers.
// The switcher starts on the initial engine if it answered, else on the
// first engine in order that did. Coming back from a degraded start is
// a failback: with failback.after set, the switcher returns to the first
// engine once it has been healthy that long; without, it stays until the
// source names another engine. A file source that names the engine that was
// down does not pull the switcher back (as after a breaker switch); an etcd
// or zk source that names it is the fleet's decision, which the switcher
// defers until the engine is healthy and then follows.
//
// Open fails only when no engine answers, with an error naming each engine
// and why, wrapping locker.ErrUnavailable, within start_timeout plus the
// time to close what it built; or when an engine refuses the credentials
// (locker.ErrPermission) or its settings, which retrying would not cure.
// An etcd engine with a username authenticates while it is built: with its
// cluster down it cannot start degraded, and fails Open like those.
// Every engine is waited for at the same time, so one that hangs costs
// start_timeout once, not once per engine. The source (etcd or zk) must
// still answer within its own start_timeout.
//
// The initial engine is active, or, with an etcd or zk source, the shared
// key's value when it names a known engine: the fleet's choice wins over
// the file. When it is not the first engine, Open switches to it before
// returning, which OnSwitch sees as a ReasonManual event.
//
// The *Failover Open returns embeds *switcher.Switcher. Its NewLocker
// applies the lock settings (Config.LockOptions, locker.WithTTL(lock.ttl))
// before the caller's options, which win. Its Close closes the switcher
// (health checks, watch, engines, which release the holds still held) and
// then the Redis and etcd clients and the ZooKeeper connection Open
// dialled; nothing Open started outlives it. WithSwitcherOptions passes
// what a file cannot say, such as switcher.OnSwitch; WithLogger sets the
// logger of everything Open starts, go-redis's own lines included (its
// logger is global: see Open).
//
// # Sources
//
// source.type says what names the active engine while running:
//
//   - none (the default of a Config built in code): only SwitchEngine,
//     SwitchEngineTo, the breakers and failback switch.
//   - file (the default of a Config from Load): the active key of the file
//     Load read. The file's directory is
//     watched with fsnotify (so that editors that save by rename, and
//     Kubernetes ConfigMap symlink swaps, are seen); after 100ms without
//     events the file is read again, with its environment overrides, and
//     validated. A valid active that changed is applied, and so is an
//     active rewritten unchanged (the same content written again, or the
//     file replaced by a copy of itself, at the same path): a file has no
//     version, so a write is how an operator asks again, for instance to
//     bring back processes that a breaker moved off the engine the file
//     names. A file that does not parse or validate is logged and the last
//     good configuration is kept. Other changes, and a symlink swap that
//     leaves active as it was (a ConfigMap whose other keys changed), are
//     logged and take effect on the next Open.
//     ORTHRUS_ACTIVE, when set, pins active. Only a Config from Load can
//     use it.
//   - etcd: the key source.key on source.endpoints, through
//     switcher/etcdsource; one write flips the fleet.
//   - zk: the node source.path on source.servers, through
//     switcher/zksource.
//
// Failover.Source returns the running source; all three implement
// switcher.Setter. The file source's Set is SetActive: it rewrites the
// file's top-level active key in place, keeping comments and layout, and
// replaces the file atomically, so that every process watching it follows;
// when the file names the engine already, Set replaces it with a copy of
// itself, which every process watching it applies again.
// An unreachable etcd or zk source fails Open, like an unreachable engine.
//
// # Operator tools
//
// lockctl starts engines, clients and the source on their own, with the
// same settings as Open, so that it works while an engine is down
// (cmd/lockctl/internal/cfgops); Config.ForDrill moves a drill's locks
// under drill-only prefixes.
package config
