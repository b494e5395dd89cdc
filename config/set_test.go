package config_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/config"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/switcher"
)

const (
	yamlEngines = `engines:   # in order
  - {name: a, type: redis, addrs: ["127.0.0.1:1"]}
  - {name: b, type: redis, addrs: ["127.0.0.1:2"]}
  - name: "true"
    type: redis
    addrs: ["127.0.0.1:3"]
`
	tomlEngines = `[[engines]]
name = "a"   # primary
type = "redis"
addrs = ["127.0.0.1:1"]

[[engines]]
name = "b"
type = "redis"
addrs = ["127.0.0.1:2"]
`
)

func TestSetActive(t *testing.T) {
	clearEnv(t)
	for _, tc := range []struct {
		desc, file, engine string
		content, want      string
	}{
		{
			desc: "yaml keeps comments and layout", file: "c.yaml", engine: "b",
			content: "# orthrus locks for billing\n# active: a is a comment\nactive: a   # flip me\n" + yamlEngines + "lock: {ttl: 20s}\n# the end\n",
			want:    "# orthrus locks for billing\n# active: a is a comment\nactive: b   # flip me\n" + yamlEngines + "lock: {ttl: 20s}\n# the end\n",
		},
		{
			desc: "yaml double quotes", file: "c.yml", engine: "b",
			content: "name: x\nactive: \"a\"\n" + yamlEngines,
			want:    "name: x\nactive: \"b\"\n" + yamlEngines,
		},
		{
			desc: "yaml single quotes", file: "c.yaml", engine: "b",
			content: "active: 'a' # note\n" + yamlEngines,
			want:    "active: 'b' # note\n" + yamlEngines,
		},
		{
			desc: "yaml quotes a name that would not read back plain", file: "c.yaml", engine: "true",
			content: "active: a\n" + yamlEngines,
			want:    "active: \"true\"\n" + yamlEngines,
		},
		{
			desc: "yaml key not first, CRLF", file: "c.yaml", engine: "b",
			content: strings.ReplaceAll(yamlEngines+"active: a\n", "\n", "\r\n"),
			want:    strings.ReplaceAll(yamlEngines+"active: b\n", "\n", "\r\n"),
		},
		{
			desc: "yaml missing key goes on top", file: "c.yaml", engine: "b",
			content: "# header\n" + yamlEngines,
			want:    "active: b\n# header\n" + yamlEngines,
		},
		{
			desc: "yaml missing key after a document start", file: "c.yaml", engine: "b",
			content: "# header\n---\n" + yamlEngines,
			want:    "# header\n---\nactive: b\n" + yamlEngines,
		},
		{
			desc: "yaml flow mapping", file: "c.yaml", engine: "b",
			content: `{active: a, engines: [{name: a, type: redis, addrs: ["127.0.0.1:1"]}, {name: b, type: redis, addrs: ["127.0.0.1:2"]}]}` + "\n",
			want:    `{active: b, engines: [{name: a, type: redis, addrs: ["127.0.0.1:1"]}, {name: b, type: redis, addrs: ["127.0.0.1:2"]}]}` + "\n",
		},
		{
			desc: "toml keeps comments and tables", file: "c.toml", engine: "b",
			content: "# orthrus\nname = \"x\"\nactive = \"a\" # flip me\n\n" + tomlEngines + "\n[lock]\nttl = \"20s\"\n",
			want:    "# orthrus\nname = \"x\"\nactive = \"b\" # flip me\n\n" + tomlEngines + "\n[lock]\nttl = \"20s\"\n",
		},
		{
			desc: "toml literal string", file: "c.toml", engine: "b",
			content: "active = 'a'\n" + tomlEngines,
			want:    "active = 'b'\n" + tomlEngines,
		},
		{
			desc: "toml missing key goes before the tables", file: "c.toml", engine: "b",
			content: "# header\n" + tomlEngines,
			want:    "active = \"b\"\n# header\n" + tomlEngines,
		},
		{
			desc: "json keeps member order and layout", file: "c.json", engine: "b",
			content: "{\n  \"name\": \"x\",\n  \"active\": \"a\",\n  \"engines\": [\n    {\"name\": \"a\", \"type\": \"redis\", \"addrs\": [\"127.0.0.1:1\"]},\n    {\"name\": \"b\", \"type\": \"redis\", \"addrs\": [\"127.0.0.1:2\"]}\n  ]\n}\n",
			want:    "{\n  \"name\": \"x\",\n  \"active\": \"b\",\n  \"engines\": [\n    {\"name\": \"a\", \"type\": \"redis\", \"addrs\": [\"127.0.0.1:1\"]},\n    {\"name\": \"b\", \"type\": \"redis\", \"addrs\": [\"127.0.0.1:2\"]}\n  ]\n}\n",
		},
		{
			desc: "json missing member goes first", file: "c.json", engine: "b",
			content: "{\n  \"engines\": [{\"name\": \"a\", \"type\": \"redis\", \"addrs\": [\"127.0.0.1:1\"]}, {\"name\": \"b\", \"type\": \"redis\", \"addrs\": [\"127.0.0.1:2\"]}]\n}\n",
			want:    "{\n  \"active\": \"b\",\n  \"engines\": [{\"name\": \"a\", \"type\": \"redis\", \"addrs\": [\"127.0.0.1:1\"]}, {\"name\": \"b\", \"type\": \"redis\", \"addrs\": [\"127.0.0.1:2\"]}]\n}\n",
		},
		{
			desc: "same value writes nothing", file: "c.yaml", engine: "a",
			content: "active: a\n" + yamlEngines,
			want:    "active: a\n" + yamlEngines,
		},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, tc.file)
			if err := os.WriteFile(path, []byte(tc.content), 0o640); err != nil {
				t.Fatal(err)
			}
			before, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := config.SetActive(path, tc.engine); err != nil {
				t.Fatalf("SetActive(%q) = %v", tc.engine, err)
			}
			after, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if replaced := !os.SameFile(before, after); replaced != (tc.content != tc.want) {
				t.Errorf("file replaced = %v; want %v", replaced, tc.content != tc.want)
			}
			got, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Errorf("file after SetActive(%q):\n%s\nwant:\n%s", tc.engine, got, tc.want)
			}
			c, err := config.Load(path)
			if err != nil {
				t.Fatalf("Load() after SetActive = %v", err)
			}
			if c.Active != tc.engine {
				t.Errorf("Load().Active = %q; want %q", c.Active, tc.engine)
			}
			checkDir(t, dir, tc.file, 0o640)
		})
	}
}

// checkDir checks that the directory holds only the file, with its mode:
// no temporary file left behind.
func checkDir(t *testing.T, dir, name string, mode os.FileMode) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != name {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("directory holds %q; want only %q", names, name)
	}
	fi, err := os.Stat(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != mode {
		t.Errorf("mode = %v; want %v", fi.Mode().Perm(), mode)
	}
}

func TestSetActiveRejects(t *testing.T) {
	clearEnv(t)
	for _, tc := range []struct {
		desc, file, engine, content string
		want                        []string // in the error
		invalid                     bool     // wraps ErrInvalidArgument
	}{
		{
			desc: "unknown engine", file: "c.yaml", engine: "nope",
			content: "active: a\n" + yamlEngines,
			want:    []string{"active", `"nope"`, `"a", "b", "true"`}, invalid: true,
		},
		{
			desc: "unknown engine in toml", file: "c.toml", engine: "",
			content: "active = \"a\"\n" + tomlEngines,
			want:    []string{"active", `unknown engine ""`, `"a", "b"`}, invalid: true,
		},
		{
			desc: "file invalid elsewhere", file: "c.json", engine: "b",
			content: `{"active": "a", "lock": {"ttl": "soon"}, "engines": [{"name": "a", "type": "redis", "addrs": ["x:1"]}, {"name": "b", "type": "redis", "addrs": ["x:2"]}]}`,
			want:    []string{"fix the file", "lock.ttl"}, invalid: true,
		},
		{
			desc: "multi-line active", file: "c.yaml", engine: "b",
			content: "active: |\n  a\n" + yamlEngines,
			want:    []string{"active", "one-line"}, invalid: true,
		},
		{
			desc: "aliased active", file: "c.yaml", engine: "b",
			content: "name: &n a\nactive: *n\n" + yamlEngines,
			want:    []string{"active", "one-line"}, invalid: true,
		},
		{
			desc: "anchored active", file: "c.yaml", engine: "b",
			content: "active: &x a\nengines:\n  - {name: *x, type: redis, addrs: [\"127.0.0.1:1\"]}\n  - {name: b, type: redis, addrs: [\"127.0.0.1:2\"]}\n",
			want:    []string{"active", "without anchor"}, invalid: true,
		},
		{
			desc: "unsupported format", file: "c.ini", engine: "b",
			content: "active = a\n",
			want:    []string{"unsupported format"}, invalid: true,
		},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			dir := t.TempDir()
			path := writeFile(t, dir, tc.file, tc.content)
			err := config.SetActive(path, tc.engine)
			if err == nil {
				t.Fatalf("SetActive(%q) = nil; want an error naming %q", tc.engine, tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("SetActive(%q) = %v; want it to name %s", tc.engine, err, w)
				}
			}
			if tc.invalid && !errors.Is(err, locker.ErrInvalidArgument) {
				t.Errorf("SetActive(%q) = %v; want ErrInvalidArgument", tc.engine, err)
			}
			if got, _ := os.ReadFile(path); string(got) != tc.content {
				t.Errorf("file after a failed SetActive:\n%s\nwant it unchanged:\n%s", got, tc.content)
			}
			checkDir(t, dir, tc.file, 0o600)
		})
	}
	var fe *config.FieldError
	err := config.SetActive(writeFile(t, t.TempDir(), "c.yaml", "active: a\n"+yamlEngines), "nope")
	if !errors.As(err, &fe) || fe.Field != "active" {
		t.Errorf("SetActive(unknown) = %v; want a FieldError on active", err)
	}
	if err := config.SetActive(filepath.Join(t.TempDir(), "missing.yaml"), "a"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("SetActive(missing file) = %v; want ErrNotExist", err)
	}
}

// A link is followed: its target is rewritten, the link kept.
func TestSetActiveSymlink(t *testing.T) {
	clearEnv(t)
	targetDir, linkDir := t.TempDir(), t.TempDir()
	target := writeFile(t, targetDir, "orthrus.yaml", "active: a\n"+yamlEngines)
	link := filepath.Join(linkDir, "locks.yaml")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if err := config.SetActive(link, "b"); err != nil {
		t.Fatalf("SetActive() = %v", err)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("Lstat(link) = %v, %v; want the link kept", fi, err)
	}
	if got, _ := os.ReadFile(target); string(got) != "active: b\n"+yamlEngines {
		t.Errorf("target after SetActive:\n%s\nwant active: b", got)
	}
	checkDir(t, targetDir, "orthrus.yaml", 0o600)
}

// A running switcher with source.type file follows a Set, as does every
// other process watching the file, within a second: through a link to
// another directory too.
func TestFileSourceSet(t *testing.T) {
	clearEnv(t)
	for _, linked := range []bool{false, true} {
		name := "file"
		if linked {
			name = "link"
		}
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := writeFile(t, dir, "orthrus.yaml", "# fleet switch\nactive: a # flipped by lockctl switch\nsource: {type: file}\n"+twoRedis())
			if linked {
				link := filepath.Join(t.TempDir(), "locks.yaml")
				if err := os.Symlink(path, link); err != nil {
					t.Fatal(err)
				}
				path = link
			}
			c, err := config.Load(path)
			if err != nil {
				t.Fatalf("Load() = %v", err)
			}
			sw1, sw2 := open(t, c, quiet), open(t, c, quiet)
			setter, ok := sw1.Source().(switcher.Setter)
			if !ok {
				t.Fatalf("Source() = %T; want a switcher.Setter", sw1.Source())
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			for _, want := range []string{"b", "a"} {
				start := time.Now()
				if err := setter.Set(ctx, want); err != nil {
					t.Fatalf("Set(%q) = %v", want, err)
				}
				for i, sw := range []*config.Failover{sw1, sw2} {
					eventually(t, time.Second-time.Since(start), fmt.Sprintf("switcher %d follows Set(%q)", i+1, want), func() bool { return sw.Current() == want })
				}
			}
			if err := setter.Set(ctx, "nope"); err == nil || !strings.Contains(err.Error(), "active") {
				t.Errorf("Set(nope) = %v; want an error naming active", err)
			}
			cancelled, cancelNow := context.WithCancel(context.Background())
			cancelNow()
			if err := setter.Set(cancelled, "b"); !errors.Is(err, context.Canceled) {
				t.Errorf("Set(cancelled ctx) = %v; want context.Canceled", err)
			}
			got, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(string(got), "# fleet switch\nactive: a # flipped by lockctl switch\n") {
				t.Errorf("file after Set:\n%s\nwant comments kept and active: a", got)
			}
		})
	}
}
