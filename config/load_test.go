package config_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/config"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/driver"
)

const fullYAML = `
name: billing
active: zk-backup
start_timeout: 3s
engines:
  - name: redis-main
    type: redis
    addrs: ["10.0.0.5:6379"]
    prefix: myapp/locks
    db: 2
    username: app
    password: from-file
  - name: zk-backup
    type: zk
    servers: ["10.0.0.7:2181", "10.0.0.8:2181"]
    session_timeout: 8s
    auth: {scheme: digest, credentials: "app:secret"}
  - name: etcd-main
    type: etcd
    endpoints: ["10.0.0.9:2379"]
    dial_timeout: 2s
lock: {ttl: 20s}
breaker: {failures: 5, open_timeout: 10s, outage_wait: 8s}
health: {every: 500ms, timeout: 2s}
failback: {after: 1m}
safe_switch: {max_ttl: 45s}
source: {type: etcd, endpoints: ["10.0.0.9:2379"], key: /myapp/orthrus/active}
`

const fullTOML = `
name = "billing"
active = "zk-backup"
start_timeout = "3s"

[[engines]]
name = "redis-main"
type = "redis"
addrs = ["10.0.0.5:6379"]
prefix = "myapp/locks"
db = 2
username = "app"
password = "from-file"

[[engines]]
name = "zk-backup"
type = "zk"
servers = ["10.0.0.7:2181", "10.0.0.8:2181"]
session_timeout = "8s"
auth = { scheme = "digest", credentials = "app:secret" }

[[engines]]
name = "etcd-main"
type = "etcd"
endpoints = ["10.0.0.9:2379"]
dial_timeout = "2s"

[lock]
ttl = "20s"

[breaker]
failures = 5
open_timeout = "10s"
outage_wait = "8s"

[health]
every = "500ms"
timeout = "2s"

[failback]
after = "1m"

[safe_switch]
max_ttl = "45s"

[source]
type = "etcd"
endpoints = ["10.0.0.9:2379"]
key = "/myapp/orthrus/active"
`

const fullJSON = `{
  "name": "billing",
  "active": "zk-backup",
  "start_timeout": "3s",
  "engines": [
    {"name": "redis-main", "type": "redis", "addrs": ["10.0.0.5:6379"], "prefix": "myapp/locks",
     "db": 2, "username": "app", "password": "from-file"},
    {"name": "zk-backup", "type": "zk", "servers": ["10.0.0.7:2181", "10.0.0.8:2181"],
     "session_timeout": "8s", "auth": {"scheme": "digest", "credentials": "app:secret"}},
    {"name": "etcd-main", "type": "etcd", "endpoints": ["10.0.0.9:2379"], "dial_timeout": "2s"}
  ],
  "lock": {"ttl": "20s"},
  "breaker": {"failures": 5, "open_timeout": "10s", "outage_wait": "8s"},
  "health": {"every": "500ms", "timeout": "2s"},
  "failback": {"after": "1m"},
  "safe_switch": {"max_ttl": "45s"},
  "source": {"type": "etcd", "endpoints": ["10.0.0.9:2379"], "key": "/myapp/orthrus/active"}
}`

// wantFull is what the three files above hold.
func wantFull() config.Config {
	return config.Config{
		Name:         "billing",
		Active:       "zk-backup",
		StartTimeout: 3 * time.Second,
		Engines: []config.Engine{
			{Name: "redis-main", Type: "redis", Addrs: []string{"10.0.0.5:6379"}, Prefix: "myapp/locks",
				DB: 2, Username: "app", Password: "from-file"},
			{Name: "zk-backup", Type: "zk", Servers: []string{"10.0.0.7:2181", "10.0.0.8:2181"},
				SessionTimeout: 8 * time.Second, Auth: config.Auth{Scheme: "digest", Credentials: "app:secret"}},
			{Name: "etcd-main", Type: "etcd", Endpoints: []string{"10.0.0.9:2379"}, DialTimeout: 2 * time.Second},
		},
		Lock:       config.Lock{TTL: 20 * time.Second},
		Breaker:    config.Breaker{Failures: 5, OpenTimeout: 10 * time.Second, OutageWait: 8 * time.Second},
		Health:     config.Health{Every: 500 * time.Millisecond, Timeout: 2 * time.Second},
		Failback:   config.Failback{After: time.Minute},
		SafeSwitch: config.SafeSwitch{MaxTTL: 45 * time.Second},
		Source:     config.Source{Type: "etcd", Endpoints: []string{"10.0.0.9:2379"}, Key: "/myapp/orthrus/active"},
	}
}

// clearEnv unsets every ORTHRUS_ variable for the test.
func clearEnv(t *testing.T) {
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "ORTHRUS_") {
			t.Setenv(k, "")
		}
	}
}

func TestLoadFormats(t *testing.T) {
	clearEnv(t)
	dir := t.TempDir()
	for _, tc := range []struct{ name, content string }{
		{"orthrus.yaml", fullYAML},
		{"orthrus.yml", fullYAML},
		{"orthrus.toml", fullTOML},
		{"orthrus.json", fullJSON},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeFile(t, dir, tc.name, tc.content)
			c, err := config.Load(path)
			if err != nil {
				t.Fatalf("Load() = %v", err)
			}
			if c.File() != path {
				t.Errorf("File() = %q; want %q", c.File(), path)
			}
			got, want := *c, wantFull()
			if !reflect.DeepEqual(got.Engines, want.Engines) {
				t.Errorf("Engines = %+v\nwant %+v", got.Engines, want.Engines)
			}
			got.Engines, want.Engines = nil, nil
			if got.File() == "" || !reflect.DeepEqual(clearFile(got), want) {
				t.Errorf("Load() = %+v\nwant %+v", got, want)
			}
		})
	}
}

// clearFile returns c without the path it was loaded from, to compare it
// with a literal.
func clearFile(c config.Config) config.Config {
	var d config.Config
	d.Name, d.Active, d.StartTimeout, d.Engines = c.Name, c.Active, c.StartTimeout, c.Engines
	d.Lock, d.Breaker, d.Health, d.Failback, d.SafeSwitch, d.Source = c.Lock, c.Breaker, c.Health, c.Failback, c.SafeSwitch, c.Source
	return d
}

func TestLoadDefaults(t *testing.T) {
	clearEnv(t)
	path := writeFile(t, t.TempDir(), "min.yaml", `
engines:
  - {name: a, type: redis, addrs: ["127.0.0.1:6379"]}
  - {name: b, type: zk, servers: ["127.0.0.1:2181"]}
`)
	c, err := config.Load(path)
	if err != nil {
		t.Fatalf("Load() = %v", err)
	}
	got := clearFile(*c)
	got.Engines = nil
	want := config.Config{
		Active:       "a",
		StartTimeout: 5 * time.Second, // the documented defaults
		Lock:         config.Lock{TTL: 30 * time.Second},
		Breaker:      config.Breaker{Failures: 3, OpenTimeout: 500 * time.Millisecond},
		Health:       config.Health{Every: 100 * time.Millisecond, Timeout: 300 * time.Millisecond},
		Source:       config.Source{Type: "file"}, // a loaded file follows its own active
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Load() = %+v\nwant %+v", got, want)
	}
	opts := c.LockOptions()
	s, err := driver.Resolve(opts...)
	if err != nil || s.TTL != 30*time.Second || !s.Renew || s.Weight != 1 {
		t.Errorf("LockOptions() resolve to TTL %v, renew %v, weight %d, err %v; want 30s, true, 1, nil", s.TTL, s.Renew, s.Weight, err)
	}
}

func TestLoadWeight(t *testing.T) {
	clearEnv(t)
	path := writeFile(t, t.TempDir(), "w.yaml", "lock: {weight: 7}\nengines:\n  - {name: a, type: redis, addrs: [\"127.0.0.1:6379\"]}\n")
	c, err := config.Load(path)
	if err != nil {
		t.Fatalf("Load() = %v", err)
	}
	s, err := driver.Resolve(c.LockOptions()...)
	if err != nil || s.Weight != 7 {
		t.Errorf("LockOptions() resolve to weight %d, err %v; want 7, nil", s.Weight, err)
	}
}

func TestLoadErrors(t *testing.T) {
	clearEnv(t)
	const two = `
engines:
  - {name: a, type: redis, addrs: ["127.0.0.1:6379"]}
  - {name: b, type: zk, servers: ["127.0.0.1:2181"]}
`
	for _, tc := range []struct {
		name    string
		content string
		field   string // FieldError.Field of the first problem
		msg     string // in the message
	}{
		{"unknown type", "engines:\n  - {name: a, type: redis, addrs: [x]}\n  - {name: b, type: rediss, addrs: [x]}\n",
			"engines[1].type", `engines[1].type: unknown engine "rediss" (want redis, zk, etcd, postgres, redlock)`},
		{"missing type", "engines:\n  - {name: a, addrs: [x]}\n", "engines[0].type", "engines[0].type: empty (want redis, zk, etcd, postgres, redlock)"},
		{"no engines", "active: a\n", "engines", "engines: empty"},
		{"empty engines", "engines: []\n", "engines", "engines: empty"},
		{"duplicate name", "engines:\n  - {name: a, type: redis, addrs: [x]}\n  - {name: b, type: redis, addrs: [x]}\n  - {name: a, type: redis, addrs: [x]}\n",
			"engines[2].name", `engines[2].name: duplicate "a" (also engines[0])`},
		{"empty name", "engines:\n  - {type: redis, addrs: [x]}\n", "engines[0].name", "engines[0].name: empty"},
		{"unknown active", "active: x\n" + two, "active", `active: unknown engine "x" (want one of "a", "b")`},
		{"no addrs", "engines:\n  - {name: a, type: redis}\n", "engines[0].addrs", "engines[0].addrs: empty"},
		{"blank addr", "engines:\n  - {name: a, type: redis, addrs: [x, ' ']}\n", "engines[0].addrs[1]", "engines[0].addrs[1]: empty address"},
		{"no servers", "engines:\n  - {name: a, type: zk}\n", "engines[0].servers", "engines[0].servers: empty"},
		{"no endpoints", "engines:\n  - {name: a, type: etcd}\n", "engines[0].endpoints", "engines[0].endpoints: empty"},
		{"no dsn", "engines:\n  - {name: a, type: postgres}\n", "engines[0].dsn", "engines[0].dsn: empty (or set dsn_file)"},
		{"dsn on redis", "engines:\n  - {name: a, type: redis, addrs: [x], dsn: 'postgres://x'}\n", "engines[0].dsn",
			"engines[0].dsn: not a redis setting (only postgres)"},
		{"postgres prefix", "engines:\n  - {name: a, type: postgres, dsn: 'postgres://x', prefix: 'pg_x'}\n", "engines[0].prefix", "pg_"},
		{"redlock of 2", "engines:\n  - {name: a, type: redlock, addrs: [x, y]}\n", "engines[0].addrs",
			"engines[0].addrs: redlock needs at least 3 independent masters, got 2"},
		{"redlock duplicate addr", "engines:\n  - {name: a, type: redlock, addrs: ['h:1', 'h:2', 'h:1']}\n", "engines[0].addrs[2]",
			`engines[0].addrs[2]: duplicate address "h:1" (also addrs[0])`},
		{"redlock no addrs", "engines:\n  - {name: a, type: redlock}\n", "engines[0].addrs", "engines[0].addrs: empty"},
		{"dsn on redlock", "engines:\n  - {name: a, type: redlock, addrs: [x, y, z], dsn: 'postgres://x'}\n", "engines[0].dsn",
			"engines[0].dsn: not a redlock setting (only postgres)"},
		{"db on redlock", "engines:\n  - {name: a, type: redlock, addrs: [x, y, z], db: 1}\n", "engines[0].db",
			"engines[0].db: not a redlock setting (only redis)"},
		{"master_name on redlock", "engines:\n  - {name: a, type: redlock, addrs: [x, y, z], master_name: m}\n", "engines[0].master_name",
			"engines[0].master_name: not a redlock setting (only redis)"},
		{"node_timeout on redis", "engines:\n  - {name: a, type: redis, addrs: [x], node_timeout: 1s}\n", "engines[0].node_timeout",
			"engines[0].node_timeout: not a redis setting (only redlock)"},
		{"negative node_timeout", "engines:\n  - {name: a, type: redlock, addrs: [x, y, z], node_timeout: -1ms}\n", "engines[0].node_timeout",
			"engines[0].node_timeout: must be positive, got -1ms"},
		{"redlock tls off", "engines:\n  - {name: a, type: redlock, addrs: [x, y, z], tls: {ca_file: /x}}\n", "engines[0].tls.enabled",
			"false while other tls settings are set"},
		{"ttl below the redlock minimum", "lock: {ttl: 250ms}\nengines:\n  - {name: r, type: redis, addrs: [x]}\n  - {name: q, type: redlock, addrs: [x, y, z]}\n",
			"lock.ttl", `lock.ttl: 250ms is below 300ms, the minimum TTL of engine "q" (redlock)`},
		{"ttl below a slow redlock's minimum", "lock: {ttl: 1s}\nengines:\n  - {name: q, type: redlock, addrs: [x, y, z], node_timeout: 500ms}\n  - {name: e, type: etcd, endpoints: [x]}\n",
			"lock.ttl", `lock.ttl: 1s is below 1.1s, the minimum TTL of engine "q" (redlock)`},
		{"weight over 10", "lock: {weight: 11}\n" + two, "lock.weight", "lock.weight: must be 1 to 10, got 11"},
		{"negative weight", "lock: {weight: -1}\n" + two, "lock.weight", "lock.weight: must be 1 to 10, got -1"},
		{"negative ttl", "lock: {ttl: -1s}\n" + two, "lock.ttl", "lock.ttl: must be positive, got -1s"},
		{"ttl below the minimum", "lock: {ttl: 1ns}\n" + two, "lock.ttl", `lock.ttl: 1ns is below 100ms, the minimum TTL of engine "a" (redis)`},
		{"ttl below the largest minimum", "lock: {ttl: 500ms}\nengines:\n  - {name: r, type: redis, addrs: [x]}\n  - {name: e, type: etcd, endpoints: [x]}\n",
			"lock.ttl", `lock.ttl: 500ms is below 1s, the minimum TTL of engine "e" (etcd)`},
		{"bad duration", "lock: {ttl: 30 seconds}\n" + two, "lock.ttl", `lock.ttl: want a duration such as "30s" or "1m30s", got "30 seconds"`},
		{"number duration", "lock: {ttl: 30}\n" + two, "lock.ttl", `lock.ttl: want a duration with a unit such as "30s", got the number 30`},
		{"string for int", "breaker: {failures: many}\n" + two, "breaker.failures", "breaker.failures: want an integer, got a string"},
		{"negative failures", "breaker: {failures: -1}\n" + two, "breaker.failures", "breaker.failures: must be positive, got -1"},
		{"negative open timeout", "breaker: {open_timeout: -5s}\n" + two, "breaker.open_timeout", "must be positive"},
		{"negative outage wait", "breaker: {outage_wait: -5s}\n" + two, "breaker.outage_wait", "must be positive"},
		{"negative health", "health: {every: -1s}\n" + two, "health.every", "must be positive"},
		{"negative failback", "failback: {after: -1s}\n" + two, "failback.after", "must be positive"},
		{"short safe switch", "lock: {ttl: 30s}\nsafe_switch: {max_ttl: 10s}\n" + two, "safe_switch.max_ttl",
			"safe_switch.max_ttl: 10s is shorter than lock.ttl 30s"},
		{"list for string", "active: [a]\n" + two, "active", "active: want a string (quote it), got a list"},
		{"string for list", "engines:\n  - {name: a, type: redis, addrs: 'x:1'}\n", "engines[0].addrs", "engines[0].addrs: want a list of strings, got a string"},
		{"int for string", "engines:\n  - {name: a, type: redis, addrs: [x], password: 1234}\n", "engines[0].password",
			"engines[0].password: want a string (quote it), got a number"},
		{"string for bool", "engines:\n  - {name: a, type: redis, addrs: [x], tls: {enabled: yes please}}\n", "engines[0].tls.enabled",
			"engines[0].tls.enabled: want true or false, got a string"},
		{"unknown key", "engins:\n  - {name: a}\n" + two, "", `unknown key "engins" (did you mean "engines"?)`},
		{"unknown nested key", "engines:\n  - {name: a, type: redis, adrs: [x]}\n", "engines[0]", `engines[0]: unknown key "adrs" (did you mean "addrs"?)`},
		{"unknown section key", "lock: {tll: 1s}\n" + two, "lock", `lock: unknown key "tll" (did you mean "ttl"?)`},
		{"foreign setting", "engines:\n  - {name: a, type: redis, addrs: [x], servers: [y]}\n", "engines[0].servers",
			"engines[0].servers: not a redis setting (only zk)"},
		{"fair on zk", "engines:\n  - {name: a, type: zk, servers: [x], fair: true}\n", "engines[0].fair",
			"engines[0].fair: not a zk setting (only redis)"},
		{"negative db", "engines:\n  - {name: a, type: redis, addrs: [x], db: -1}\n", "engines[0].db", "must be 0 or more"},
		{"db on cluster", "engines:\n  - {name: a, type: redis, addrs: [x, y], db: 1}\n", "engines[0].db", "must be 0 with a Cluster"},
		{"redis prefix", "engines:\n  - {name: a, type: redis, addrs: [x], prefix: 'a{b}'}\n", "engines[0].prefix", "hash tag"},
		{"zk prefix", "engines:\n  - {name: a, type: zk, servers: [x], prefix: /zookeeper/x}\n", "engines[0].prefix", "reserved"},
		{"etcd prefix", "engines:\n  - {name: a, type: etcd, endpoints: [x], prefix: a/}\n", "engines[0].prefix", "ends with '/'"},
		{"half auth", "engines:\n  - {name: a, type: zk, servers: [x], auth: {scheme: digest}}\n", "engines[0].auth.credentials", "empty while auth.scheme is set"},
		{"digest auth", "engines:\n  - {name: a, type: zk, servers: [x], auth: {scheme: digest, credentials: nocolon}}\n",
			"engines[0].auth.credentials", `want "user:password"`},
		{"tls off", "engines:\n  - {name: a, type: redis, addrs: [x], tls: {ca_file: /x}}\n", "engines[0].tls.enabled", "false while other tls settings are set"},
		{"tls missing ca", "engines:\n  - {name: a, type: redis, addrs: [x], tls: {enabled: true, ca_file: /no/such/ca.pem}}\n", "engines[0].tls.ca_file", "no such file"},
		{"tls cert without key", "engines:\n  - {name: a, type: etcd, endpoints: [x], tls: {enabled: true, cert_file: /x.pem}}\n", "engines[0].tls.key_file", "empty while cert_file is set"},
		{"unknown source", "source: {type: consul}\n" + two, "source.type", `source.type: unknown source "consul" (want file, etcd, zk or none)`},
		{"etcd source without key", "source: {type: etcd, endpoints: [x]}\n" + two, "source.key", "source.key: empty"},
		{"zk source relative path", "source: {type: zk, servers: [x], path: a/b}\n" + two, "source.path", "absolute"},
		{"foreign source setting", "source: {type: file, key: /k}\n" + two, "source.key", "source.key: not a file setting (only etcd)"},
		{"negative start timeout", "start_timeout: -1s\n" + two, "start_timeout", "must be positive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeFile(t, t.TempDir(), "c.yaml", tc.content)
			_, err := config.Load(path)
			if !errors.Is(err, locker.ErrInvalidArgument) {
				t.Fatalf("Load() = %v; want an error wrapping ErrInvalidArgument", err)
			}
			var ve *config.ValidationError
			if !errors.As(err, &ve) || len(ve.Fields) == 0 {
				t.Fatalf("Load() = %v; want a *ValidationError", err)
			}
			if ve.Fields[0].Field != tc.field {
				t.Errorf("first problem's Field = %q; want %q (error: %v)", ve.Fields[0].Field, tc.field, err)
			}
			if !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("Load() = %v; want it to contain %q", err, tc.msg)
			}
			if !strings.Contains(err.Error(), path) {
				t.Errorf("Load() = %v; want it to name the file", err)
			}
		})
	}
}

func TestLoadNoSecretInErrors(t *testing.T) {
	clearEnv(t)
	path := writeFile(t, t.TempDir(), "c.yaml", "engines:\n  - {name: a, type: redis, addrs: [x], password: 987654321}\n")
	_, err := config.Load(path)
	if err == nil || strings.Contains(err.Error(), "987654321") {
		t.Errorf("Load() = %v; want an error that does not show the value", err)
	}
}

func TestLoadFileErrors(t *testing.T) {
	clearEnv(t)
	dir := t.TempDir()
	if _, err := config.Load(filepath.Join(dir, "missing.yaml")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load(missing) = %v; want an error wrapping fs.ErrNotExist", err)
	}
	ini := writeFile(t, dir, "c.ini", "a=b\n")
	if _, err := config.Load(ini); !errors.Is(err, locker.ErrInvalidArgument) || !strings.Contains(err.Error(), `unsupported format ".ini"`) {
		t.Errorf("Load(.ini) = %v; want an unsupported format error", err)
	}
	bad := writeFile(t, dir, "bad.yaml", "engines: [\n")
	if _, err := config.Load(bad); !errors.Is(err, locker.ErrInvalidArgument) {
		t.Errorf("Load(malformed) = %v; want an error wrapping ErrInvalidArgument", err)
	}
	badJSON := writeFile(t, dir, "bad.json", `{"engines": [`)
	if _, err := config.Load(badJSON); !errors.Is(err, locker.ErrInvalidArgument) {
		t.Errorf("Load(malformed JSON) = %v; want an error wrapping ErrInvalidArgument", err)
	}
	frac := writeFile(t, dir, "frac.json", `{"engines": [{"name": "a", "type": "redis", "addrs": ["x"], "db": 1.5}]}`)
	if _, err := config.Load(frac); err == nil || !strings.Contains(err.Error(), "engines[0].db: want an integer, got 1.5") {
		t.Errorf("Load(db 1.5) = %v; want engines[0].db: want an integer", err)
	}
}

func TestEnvOverrides(t *testing.T) {
	clearEnv(t)
	path := writeFile(t, t.TempDir(), "c.yaml", fullYAML)
	t.Setenv("ORTHRUS_ENGINES_REDIS_MAIN_PASSWORD", "from-env")
	t.Setenv("ORTHRUS_ENGINES_ZK_BACKUP_AUTH_CREDENTIALS", "app:env-secret")
	t.Setenv("ORTHRUS_ENGINES_ETCD_MAIN_ENDPOINTS", "10.0.1.1:2379, 10.0.1.2:2379")
	t.Setenv("ORTHRUS_ACTIVE", "etcd-main")
	t.Setenv("ORTHRUS_LOCK_TTL", "40s")
	t.Setenv("ORTHRUS_BREAKER_FAILURES", "7")
	t.Setenv("ORTHRUS_SAFE_SWITCH_MAX_TTL", "1m")
	t.Setenv("ORTHRUS_SOURCE_PASSWORD", "src-secret")
	t.Setenv("ORTHRUS_SOURCE_USERNAME", "src-user")
	c, err := config.Load(path)
	if err != nil {
		t.Fatalf("Load() = %v", err)
	}
	for _, tc := range []struct {
		name      string
		got, want any
	}{
		{"engines[0].password", c.Engines[0].Password, "from-env"},
		{"engines[0].username", c.Engines[0].Username, "app"},
		{"engines[1].auth.credentials", c.Engines[1].Auth.Credentials, "app:env-secret"},
		{"engines[2].endpoints", c.Engines[2].Endpoints, []string{"10.0.1.1:2379", "10.0.1.2:2379"}},
		{"active", c.Active, "etcd-main"},
		{"lock.ttl", c.Lock.TTL, 40 * time.Second},
		{"breaker.failures", c.Breaker.Failures, 7},
		{"safe_switch.max_ttl", c.SafeSwitch.MaxTTL, time.Minute},
		{"source.password", c.Source.Password, "src-secret"},
	} {
		if !reflect.DeepEqual(tc.got, tc.want) {
			t.Errorf("%s = %v; want %v", tc.name, tc.got, tc.want)
		}
	}
	if got := config.EnvName("redis-main", "tls.ca_file"); got != "ORTHRUS_ENGINES_REDIS_MAIN_TLS_CA_FILE" {
		t.Errorf("EnvName() = %q; want ORTHRUS_ENGINES_REDIS_MAIN_TLS_CA_FILE", got)
	}
}

func TestEnvErrors(t *testing.T) {
	clearEnv(t)
	path := writeFile(t, t.TempDir(), "c.yaml", fullYAML)
	t.Setenv("ORTHRUS_LOCK_TTL", "soon")
	_, err := config.Load(path)
	if !errors.Is(err, locker.ErrInvalidArgument) || !strings.Contains(err.Error(), `lock.ttl: ORTHRUS_LOCK_TTL: want a duration such as "30s", got "soon"`) {
		t.Errorf("Load() = %v; want lock.ttl: ORTHRUS_LOCK_TTL: want a duration", err)
	}
	t.Setenv("ORTHRUS_LOCK_TTL", "")
	t.Setenv("ORTHRUS_ACTIVE", "nope")
	if _, err := config.Load(path); err == nil || !strings.Contains(err.Error(), `active: unknown engine "nope"`) {
		t.Errorf("Load() = %v; want the overridden active validated", err)
	}

	clash := writeFile(t, t.TempDir(), "clash.yaml", `
engines:
  - {name: redis-main, type: redis, addrs: [x]}
  - {name: redis_main, type: redis, addrs: [y]}
`)
	t.Setenv("ORTHRUS_ACTIVE", "")
	if _, err := config.Load(clash); err == nil || !strings.Contains(err.Error(), `engines[1].name: "redis_main": its environment variables (ORTHRUS_ENGINES_REDIS_MAIN_*) clash with those of engines[0] "redis-main"`) {
		t.Errorf("Load() = %v; want a clash of environment names", err)
	}
}

// The shipped examples load, or name the environment variable that makes
// them load (redis-zk.yaml leaves the ZooKeeper credentials to it).
func TestExampleConfigs(t *testing.T) {
	files, err := filepath.Glob("../examples/configs/*.yaml")
	if err != nil || len(files) < 2 {
		t.Fatalf("example configs: %v, %v; want at least two", files, err)
	}
	variable := regexp.MustCompile(`\(set (ORTHRUS_[A-Z0-9_]+)\)`)
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			clearEnv(t)
			c, err := config.Load(f)
			for range 5 {
				m := variable.FindStringSubmatch(fmt.Sprint(err))
				if err == nil || m == nil || os.Getenv(m[1]) != "" {
					break
				}
				t.Setenv(m[1], "app:secret")
				c, err = config.Load(f)
			}
			if err != nil {
				t.Fatalf("Load(%s) = %v; want success, or the variable to set", f, err)
			}
			if len(c.Engines) < 2 {
				t.Errorf("Load(%s): %d engines; want a primary and a secondary", f, len(c.Engines))
			}
		})
	}
}
