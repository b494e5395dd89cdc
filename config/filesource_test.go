package config_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/config"
	"github.com/orthrus-go/orthrus/switcher"
)

// A config loaded from a file with no source section follows the file's
// active key, and keeps following it through a delete and re-create, a
// directory removed and made again, and a directory renamed away; each is
// logged, and the last good configuration is kept meanwhile.
func TestFileSourceSurvivesDeleteAndDirectoryReplacement(t *testing.T) {
	clearEnv(t)
	root := t.TempDir()
	dir := filepath.Join(root, "conf")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "orthrus.yaml")
	write := func(active string) {
		t.Helper()
		if err := os.WriteFile(path, []byte("active: "+active+"\n"+twoRedis()), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("a")
	c, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if c.Source.Type != config.SourceFile {
		t.Fatalf("Source.Type of a loaded file without source = %q; want %q", c.Source.Type, config.SourceFile)
	}
	logs := &logRecorder{}
	sw := open(t, c, config.WithLogger(slog.New(logs)))

	write("b")
	eventually(t, 2*time.Second, "switch to b", func() bool { return sw.Current() == "b" })

	// Deleted: logged, last good kept; re-created: followed.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Second, "the delete logged", func() bool { return logs.count("the file is gone; keeping the last good configuration") > 0 })
	if sw.Current() != "b" {
		t.Fatalf("Current() after delete = %q; want b (kept)", sw.Current())
	}
	write("a")
	eventually(t, 2*time.Second, "switch to a after re-create", func() bool { return sw.Current() == "a" })
	if logs.count("the file is back") == 0 {
		t.Errorf("logs %q; want the file's return logged", logs.all())
	}

	// rm -rf dir; mkdir dir; write.
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Second, "the directory's removal logged", func() bool { return logs.count("the file's directory is gone") > 0 })
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	write("b")
	eventually(t, 2*time.Second, "switch to b in the new directory", func() bool { return sw.Current() == "b" })
	if logs.count("watching the file's directory again") == 0 {
		t.Errorf("logs %q; want the re-armed watch logged", logs.all())
	}

	// mv dir dir.old; mkdir dir; write: the new directory counts.
	if err := os.Rename(dir, dir+".old"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Second, "the rename logged", func() bool { return logs.count("the file's directory is gone") > 1 })
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	write("a")
	eventually(t, 2*time.Second, "switch to a in the replaced directory", func() bool { return sw.Current() == "a" })
	// The old directory is not watched any more.
	if err := os.WriteFile(filepath.Join(dir+".old", "orthrus.yaml"), []byte("active: b\n"+twoRedis()), 0o600); err != nil {
		t.Fatal(err)
	}
	write("a")                         // an event on the watched file, after the old one's
	time.Sleep(300 * time.Millisecond) // nothing to wait for: checking that nothing happens
	if sw.Current() != "a" {
		t.Errorf("Current() = %q after a write in the old directory; want a", sw.Current())
	}
}

// After a switch away from the engine the file names (here by hand, as a
// breaker would), the file source's Set to that engine rewrites the file
// unchanged, and the switcher goes back: a file has no version, so a
// rewrite is the operator asking again. An edit of other settings that
// leaves active as it was is not applied.
func TestFileSourceRewriteAppliesActiveAgain(t *testing.T) {
	clearEnv(t)
	path := filepath.Join(t.TempDir(), "orthrus.yaml")
	content := "active: a\n" + twoRedis()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	logs := &logRecorder{}
	sw := open(t, c, config.WithLogger(slog.New(logs)))
	eventually(t, 2*time.Second, "the file's active read", func() bool { return sw.Member().Desired == "a" })
	if _, err := sw.SwitchEngineTo("b"); err != nil {
		t.Fatal(err)
	}
	set, ok := sw.Source().(switcher.Setter)
	if !ok {
		t.Fatal("the file source does not implement switcher.Setter")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := set.Set(ctx, "a"); err != nil {
		t.Fatalf("Set(a) = %v", err)
	}
	eventually(t, 2*time.Second, "back to a after Set(a) on a file naming a", func() bool { return sw.Current() == "a" })
	if got, err := os.ReadFile(path); err != nil || string(got) != content {
		t.Errorf("file after Set(a) = %q, %v; want it unchanged", got, err)
	}
	if n := logs.count("rewritten with the same active"); n != 1 {
		t.Errorf("logged the rewrite %d times; want 1: %q", n, logs.all())
	}
	// The switcher logs a switch just after making it: wait for the line.
	eventually(t, 2*time.Second, "the switch back to a logged", func() bool { return logs.count("from=b to=a reason=source") == 1 })
	if got := logs.all(); !strings.Contains(got[len(got)-1], "from=b to=a reason=source") {
		t.Errorf("last log %q; want the switch back to a by the source", got[len(got)-1])
	}

	// Another setting edited, active kept: logged, not applied.
	if _, err := sw.SwitchEngineTo("b"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content+"lock: {ttl: 7s}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Second, "the edit logged", func() bool { return logs.count("changed settings other than active") > 0 })
	if n := logs.count("rewritten with the same active"); n != 1 {
		t.Errorf("an edit of other settings was applied as a rewrite: %q", logs.all())
	}
	if got := sw.Current(); got != "b" {
		t.Errorf("Current() after an edit of other settings = %q; want b", got)
	}
}
