package config

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/orthrus-go/orthrus/switcher"
)

// debounce is how long the file must be quiet before it is read again: an
// editor's save is several events, a copy several writes.
const debounce = 100 * time.Millisecond

// fileSource is the switcher.Source of source.type "file": the active key
// of the configuration file. It watches the file's directory with fsnotify
// (editors replace files by rename, Kubernetes swaps a symlink), reads the
// file again with a fresh viper after the events settle, and applies a
// valid active that changed. A file that does not parse or validate is
// logged and the last good configuration is kept. When path is a symbolic
// link to a file in another directory, that directory is watched too, so
// that an edit of the target in place (as Set makes) is seen.
//
// Set writes the file's active key (SetActive): every process watching the
// file follows. A file has no version to tell an operator's new decision
// from the old one, so its writes stand in for one: a valid active that
// changed is applied, and so is an active rewritten unchanged (the file
// replaced or written with the same content, as Set does when the file
// names the engine already), which brings back every process that a
// breaker, a failback or a start elsewhere moved off it. An edit of other
// settings that leaves active as it was is not a decision about engines
// and is not applied. A watch error re-reads the file without applying an
// unchanged active.
type fileSource struct {
	path string // absolute
	log  *slog.Logger
	w    *fsnotify.Watcher

	// Owned by Watch once it runs.
	last    *Config // the last good configuration
	real    string  // path with symlinks resolved, when last read
	realDir string  // the directory of real, watched too; "" when it is path's
	armed   string  // the directory watched for path: its own, or the nearest existing ancestor while it is gone
	gone    bool    // the file was missing at the last read
	// lastData and lastInfo are the content and identity of the file at
	// the last read: a rewrite with the same content is an operator
	// asking again for its active.
	lastData []byte
	lastInfo os.FileInfo
	lastReal string
	// elsewhere: Open started on another engine than active, which did
	// not answer (startedElsewhere). Set before Watch runs.
	elsewhere bool

	closeOnce sync.Once
	closeErr  error
}

var (
	_ switcher.Source = (*fileSource)(nil)
	_ switcher.Setter = (*fileSource)(nil)
)

func newFileSource(c *Config, log *slog.Logger) (*fileSource, error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("config: watch %s: %w", c.file, err)
	}
	if err := w.Add(filepath.Dir(c.file)); err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("config: watch %s: %w", c.file, err)
	}
	f := &fileSource{path: c.file, log: log.With("source", "file", "file", c.file), w: w, last: c, armed: filepath.Dir(c.file)}
	f.follow()
	f.lastData, f.lastInfo = readStat(c.file)
	f.lastReal = f.real
	return f, nil
}

// arm watches the file's directory again after it was removed, or, while
// it is still gone, its nearest existing ancestor, whose events tell when
// it comes back. It reports whether the directory itself is watched.
func (f *fileSource) arm() bool {
	dir := filepath.Dir(f.path)
	for d := dir; ; d = filepath.Dir(d) {
		if d == f.armed {
			return d == dir // still in place
		}
		if err := f.w.Add(d); err != nil {
			if filepath.Dir(d) == d {
				f.log.Error("config: cannot watch the file's directory or any parent; changes go unseen", "err", err)
				return false
			}
			continue
		}
		if f.armed != "" && f.armed != d {
			_ = f.w.Remove(f.armed) // gone already when it was removed
		}
		f.armed = d
		if d == dir {
			f.log.Info("config: watching the file's directory again", "dir", dir)
			return true
		}
		f.log.Warn("config: the file's directory is gone; keeping the last good configuration and watching for it to come back",
			"dir", dir, "watching", d, "active", f.last.Active)
		return false
	}
}

// Set makes engine the active engine of the file, in place and atomically
// (see SetActive); this source, and that of every other process watching
// the file, then switches to it. When the file names engine already, Set
// replaces it with a copy of itself: every process watching it applies
// active again, so that those a breaker moved elsewhere come back (once
// engine passes their health checks). ctx is only checked first: a local
// file write does not wait on anything that a context could end.
func (f *fileSource) Set(ctx context.Context, engine string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("config: set active in %s: %w", f.path, err)
	}
	return setActive(f.path, engine, true)
}

// readStat returns the content and identity of the file at path, its
// symbolic links followed; nil when it cannot be read.
func readStat(path string) ([]byte, os.FileInfo) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil
	}
	return data, fi
}

// rewritten tells whether the file read as data and fi is the last one
// read written again with the same content: replaced by another file at
// the same place, or written in place. A symbolic link that now leads
// elsewhere is not a rewrite: Kubernetes swaps every file of a ConfigMap
// when any of them changes.
func (f *fileSource) rewritten(data []byte, fi os.FileInfo) bool {
	if f.lastInfo == nil || fi == nil || f.real != f.lastReal || !bytes.Equal(data, f.lastData) {
		return false
	}
	return !os.SameFile(f.lastInfo, fi) || !fi.ModTime().Equal(f.lastInfo.ModTime())
}

// follow resolves the path's symbolic links again and watches the target's
// directory when it is not the path's own.
func (f *fileSource) follow() {
	f.real, _ = filepath.EvalSymlinks(f.path)
	dir := ""
	if f.real != "" && filepath.Dir(f.real) != filepath.Dir(f.path) {
		dir = filepath.Dir(f.real)
	}
	if dir == f.realDir {
		return
	}
	if f.realDir != "" {
		_ = f.w.Remove(f.realDir) // gone already when a symlink swap removed it
	}
	f.realDir = ""
	if dir != "" {
		if err := f.w.Add(dir); err != nil {
			f.log.Warn("config: cannot watch the directory of the file's link target; edits of the target in place go unseen", "dir", dir, "err", err)
			return
		}
		f.realDir = dir
	}
}

// close stops the fsnotify watcher; Watch calls it on return, Failover.Close
// in case Watch never ran.
func (f *fileSource) close() error {
	f.closeOnce.Do(func() { f.closeErr = f.w.Close() })
	return f.closeErr
}

// startedElsewhere tells the source that Open started on another engine
// because active did not answer: Watch then leaves the switcher there, as
// after a breaker switch, until the file names another engine (or failback,
// if configured, returns to the primary). Applying active at once would
// instead send the switcher back to it as soon as it answers, failback or
// not, since a file's value carries no version to tell it from an
// operator's new choice.
func (f *fileSource) startedElsewhere() { f.elsewhere = true }

// Watch applies the active engine of the configuration Open was given
// (unless Open started elsewhere), then of every valid version of the
// file, until ctx is done.
func (f *fileSource) Watch(ctx context.Context, apply func(switcher.Desired)) error {
	defer f.close()
	if !f.elsewhere {
		apply(switcher.Desired{Engine: f.last.Active})
	}
	f.reload(apply) // changed between Load and now?

	timer := time.NewTimer(debounce)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-f.w.Events:
			if !ok {
				return errors.New("config: file watch ended")
			}
			if f.lostDir(ev) {
				// A removed directory's watch is gone with it; a renamed
				// one's would follow it elsewhere.
				_ = f.w.Remove(f.armed)
				f.armed = ""
			}
			if f.armed != filepath.Dir(f.path) {
				if f.arm() {
					timer.Reset(debounce) // written before the watch was back?
				}
				continue
			}
			if f.relevant(ev) {
				timer.Reset(debounce)
			}
		case err, ok := <-f.w.Errors:
			if !ok {
				return errors.New("config: file watch ended")
			}
			// Overflow: events were lost; read the file to be sure.
			f.log.Warn("config: file watch error; reading the file again", "err", err)
			timer.Reset(debounce)
		case <-timer.C:
			f.reload(apply)
		}
	}
}

// lostDir tells whether ev is the removal or renaming of the watched
// directory itself, or of one of its parents.
func (f *fileSource) lostDir(ev fsnotify.Event) bool {
	if !ev.Has(fsnotify.Remove) && !ev.Has(fsnotify.Rename) {
		return false
	}
	name := filepath.Clean(ev.Name)
	dir := filepath.Dir(f.path)
	return name == dir || strings.HasPrefix(dir, name+string(filepath.Separator))
}

// relevant tells whether ev may have changed the file: a write, creation,
// removal or renaming of the file itself or of its link target, or any
// change in the directory that makes the path resolve to another file (a
// symlink swap).
func (f *fileSource) relevant(ev fsnotify.Event) bool {
	if name := filepath.Clean(ev.Name); name == f.path || name == f.real {
		return ev.Op != fsnotify.Chmod
	}
	real, err := filepath.EvalSymlinks(f.path)
	return err == nil && real != f.real
}

// reload reads the file and applies its active engine when it changed or
// was rewritten unchanged.
func (f *fileSource) reload(apply func(switcher.Desired)) {
	f.follow()
	data, fi := readStat(f.path)
	c, err := load(f.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if !f.gone {
			f.log.Warn("config: the file is gone; keeping the last good configuration until it comes back", "active", f.last.Active)
		}
		f.gone = true
		return
	case err != nil:
		f.log.Error("config: the changed file is not valid; keeping the last good configuration", "err", err, "active", f.last.Active)
		return
	}
	if f.gone {
		f.log.Info("config: the file is back", "active", c.Active)
		f.gone = false
	}
	c.file = f.path
	prev := f.last
	if prev.drill != "" {
		c, _ = c.ForDrill(prev.drill) // valid: prev's
	}
	f.last = c
	if !sameButActive(prev, c) {
		f.log.Warn("config: the file changed settings other than active; they take effect on the next Open")
	}
	again := f.rewritten(data, fi)
	f.lastData, f.lastInfo, f.lastReal = data, fi, f.real
	switch {
	case c.Active != prev.Active:
		f.log.Info("config: active changed", "from", prev.Active, "to", c.Active)
		apply(switcher.Desired{Engine: c.Active})
	case again:
		f.log.Info("config: the file was rewritten with the same active; applying it again", "active", c.Active)
		apply(switcher.Desired{Engine: c.Active})
	}
}

func sameButActive(a, b *Config) bool {
	x, y := *a, *b
	x.Active, y.Active = "", ""
	return reflect.DeepEqual(x, y)
}
