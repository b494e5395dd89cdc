package config_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/orthrus-go/orthrus/config"
	"github.com/orthrus-go/orthrus/locker"
)

// An ORTHRUS_ variable that overrides nothing is an error naming it and
// the closest variable that does: secrets are set there, and a typo would
// otherwise go unseen.
func TestUnknownEnvironmentOverride(t *testing.T) {
	for _, tc := range []struct {
		name, value string
		want        []string
	}{
		{"ORTHRUS_LOCK_TTLL", "5s", []string{"ORTHRUS_LOCK_TTLL matches no setting", "closest is ORTHRUS_LOCK_TTL, for lock.ttl"}},
		{"ORTHRUS_ENGINES_REDISMAIN_PASSWORD", "x", []string{"ORTHRUS_ENGINES_REDISMAIN_PASSWORD", "closest is ORTHRUS_ENGINES_REDIS_MAIN_PASSWORD, for engines[0].password"}},
		{"ORTHRUS_ENGINES_REDIS_MAIN_TYPE", "zk", []string{"ORTHRUS_ENGINES_REDIS_MAIN_TYPE", "cannot be overridden"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clearEnv(t)
			t.Setenv(tc.name, tc.value)
			path := writeFile(t, t.TempDir(), "c.yaml", "engines:\n  - {name: redis-main, type: redis, addrs: [\"127.0.0.1:6379\"]}\n")
			_, err := config.Load(path)
			if !errors.Is(err, locker.ErrInvalidArgument) {
				t.Fatalf("Load() with %s set = %v; want ErrInvalidArgument", tc.name, err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Load() = %v; want it to contain %q", err, w)
				}
			}
		})
	}
}

// A syntax error names the line (and column) where it is, in every format.
func TestSyntaxErrorLine(t *testing.T) {
	clearEnv(t)
	for _, tc := range []struct {
		file, content, want string
	}{
		{"misindented.yaml", "active: a\nengines:\n  - name: a\n    type: redis\n   addrs: [x]\n", "line 5, column 4"},
		{"unclosed.yaml", "active: a\nlock:\n  ttl: 5s\n  x: [1, 2\nfoo: 1\n", "line 5, column 1"},
		{"quote.yaml", "active: a\nengines:\n  - name: a\n    type: \"redis\n    addrs: [x]\n", "line 4, column 11"},
		{"bad.toml", "active = \"a\"\n[lock]\nttl = \"5s\"\nfoo = = 3\n", "line 4, column 7"},
		{"bad.json", "{\n \"active\": \"a\",\n \"x\": ,\n}\n", "line 3, column 8"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			_, err := config.Load(writeFile(t, t.TempDir(), tc.file, tc.content))
			if !errors.Is(err, locker.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Load() = %v; want ErrInvalidArgument naming %s", err, tc.want)
			}
		})
	}
}

// Type errors do not hide the other checks: one Load reports every failed
// check, as the package doc promises, and nothing twice: a value of the
// wrong type is not also reported as missing.
func TestLoadReportsEveryProblemAtOnce(t *testing.T) {
	clearEnv(t)
	path := writeFile(t, t.TempDir(), "c.yaml", `active: x
breaker:
  failures: x
lock:
  ttl: -1s
engines:
  - name: a
    type: redis
    adrs: ["127.0.0.1:6379"]
  - name: b
    type: [zk]
    servers: ["127.0.0.1:2181"]
`)
	_, err := config.Load(path)
	var ve *config.ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("Load() = %v; want a *ValidationError", err)
	}
	var got []string
	for _, f := range ve.Fields {
		got = append(got, f.Error())
	}
	for _, want := range []string{
		`active: unknown engine "x"`,
		"breaker.failures: want an integer",
		`engines[0]: unknown key "adrs" (did you mean "addrs"?)`,
		"engines[1].type: want a string",
		"lock.ttl: must be positive, got -1s",
	} {
		if !slices.ContainsFunc(got, func(g string) bool { return strings.HasPrefix(g, want) }) {
			t.Errorf("Load() problems:\n%s\nwant one starting %q", strings.Join(got, "\n"), want)
		}
	}
	seen := make(map[string]bool)
	for _, f := range ve.Fields {
		if seen[f.Field] && f.Field != "engines[0]" {
			t.Errorf("Load() problems:\n%s\nwant one per field, %s has several", strings.Join(got, "\n"), f.Field)
		}
		seen[f.Field] = true
	}
}
