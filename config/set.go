package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/pelletier/go-toml/v2/unstable"
	"github.com/spf13/viper"
	"go.yaml.in/yaml/v3"

	"github.com/orthrus-go/orthrus/locker"
)

// setAttempts bounds how often SetActive starts over when the file changed
// while it was writing its new version.
const setAttempts = 3

// SetActive makes engine the active engine of the configuration file at
// path, as an operator's edit would: it rewrites the file's top-level active
// key in place and keeps every other byte, comments and order included.
// The file source (source.type "file") of every process watching the file
// then switches to engine. This is what Failover.Source().Set does with
// source.type "file" (which also rewrites a file that names engine
// already); SetActive needs no running switcher.
//
// The edit, by the file's extension:
//   - YAML: the value of the top-level active key, in its quoting style
//     (plain when the name needs no quotes); without one, "active: ENGINE"
//     becomes the file's first line (after a leading "---").
//   - TOML: the string value of the top-level active key, before any
//     [table]; without one, active = "ENGINE" becomes the file's first line.
//   - JSON: the string value of the top-level "active" member; without one,
//     it becomes the object's first member, indented as the next one.
//
// engine must be one of the file's engines: otherwise SetActive fails with a
// *ValidationError naming active and the engines allowed. The file must be
// valid but for its active key (environment overrides are not applied: they
// are each process's own, and ORTHRUS_ACTIVE pins a process to its engine
// whatever the file says). The value must be a one-line string: a
// multi-line, aliased or tagged active is left for a human to edit, with an
// error wrapping locker.ErrInvalidArgument. The edited file is parsed again
// and must differ from the original in active only.
//
// The new version is written to a temporary file in the file's directory,
// with the file's permission bits, synced, and renamed over the file, so
// that readers see the old or the new version, never a part. A symbolic
// link is followed: its target is replaced and the link kept. Should the
// file change while SetActive writes, it starts over from the new content,
// up to three times. The file's owner becomes the writer's. Writing the
// value the file already has changes nothing: to make the processes
// watching the file apply it again, use the file source's Set.
func SetActive(path, engine string) error { return setActive(path, engine, false) }

// setActive is SetActive; with rewrite, a file that names engine already is
// replaced all the same, by a copy of itself, which the file source of
// every process watching it applies again.
func setActive(path, engine string, rewrite bool) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return fmt.Errorf("config: set active in %s: %w", path, err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return fmt.Errorf("config: set active: %w", err)
	}
	format := strings.TrimPrefix(strings.ToLower(filepath.Ext(real)), ".")
	if format == "yml" {
		format = "yaml"
	}
	if format != "yaml" && format != "toml" && format != "json" {
		return fmt.Errorf("config: set active in %s: %w: unsupported format %q (want .yaml, .yml, .toml or .json)", abs, locker.ErrInvalidArgument, filepath.Ext(real))
	}
	for range setAttempts {
		old, err := os.ReadFile(real)
		if err != nil {
			return fmt.Errorf("config: set active: %w", err)
		}
		edited, err := editActive(abs, format, old, engine)
		if err != nil || bytes.Equal(edited, old) && !rewrite {
			return err
		}
		err = replaceFile(real, old, edited)
		if !errors.Is(err, errChanged) {
			return err
		}
	}
	return fmt.Errorf("config: set active in %s: the file kept changing while being written; try again", abs)
}

// editActive returns the file's content with engine as its active engine,
// checked: the original is valid but perhaps for active, engine is one of
// its engines, and the edit changed active and nothing else.
func editActive(path, format string, data []byte, engine string) ([]byte, error) {
	before, problems := parseConfig(format, data)
	var others []*FieldError
	for _, p := range problems {
		if p.Field != "active" {
			others = append(others, p)
		}
	}
	if before == nil || len(others) > 0 {
		if before == nil {
			others = problems
		}
		return nil, fmt.Errorf("%w (fix the file before setting active)", &ValidationError{File: path, Fields: others})
	}
	names := make([]string, len(before.Engines))
	for i, e := range before.Engines {
		names[i] = e.Name
	}
	if !slices.Contains(names, engine) {
		return nil, &ValidationError{File: path, Fields: []*FieldError{{Field: "active",
			Msg: fmt.Sprintf("unknown engine %q (want one of %s)", engine, quoteAll(names))}}}
	}
	if before.Active == engine {
		return data, nil
	}
	var edited []byte
	var err error
	switch format {
	case "yaml":
		edited, err = setYAML(data, engine)
	case "toml":
		edited, err = setTOML(data, engine)
	default:
		edited, err = setJSON(data, engine)
	}
	if err != nil {
		return nil, fmt.Errorf("config: set active in %s: %w", path, err)
	}
	after, problems := parseConfig(format, edited)
	if len(problems) > 0 || after.Active != engine || !sameButActive(before, after) {
		// A bug, or a file this editor does not understand: never write it.
		why := "other settings changed"
		if len(problems) > 0 {
			why = (&ValidationError{Fields: problems}).Error()
		}
		return nil, fmt.Errorf("config: set active in %s: %w: active: the edited file does not read back as the same configuration with active %q (%s); edit it by hand",
			path, locker.ErrInvalidArgument, engine, why)
	}
	return edited, nil
}

// parseConfig decodes and validates content as Load does, but without the
// environment.
func parseConfig(format string, data []byte) (*Config, []*FieldError) {
	v := viper.New()
	v.SetConfigType(format)
	if err := v.ReadConfig(bytes.NewReader(data)); err != nil {
		return nil, []*FieldError{{Msg: err.Error()}}
	}
	c := new(Config)
	if problems, _ := decode(v.AllSettings(), c); len(problems) > 0 {
		return nil, problems
	}
	return c, c.validate()
}

// errChanged tells that the file changed between its read and its
// replacement.
var errChanged = errors.New("file changed")

// replaceFile atomically replaces the file at path, which had content old,
// with data: a temporary file in the same directory, with the same
// permission bits, synced, then renamed over it. It returns errChanged,
// writing nothing, when the file no longer has content old.
func replaceFile(path string, old, data []byte) (err error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("config: set active: %w", err)
	}
	dir, base := filepath.Split(path)
	tmp, err := os.CreateTemp(dir, "."+base+".*.tmp")
	if err != nil {
		return fmt.Errorf("config: set active: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	if err := tmp.Chmod(fi.Mode().Perm()); err != nil {
		return fmt.Errorf("config: set active: %w", err)
	}
	if _, err := tmp.Write(data); err != nil {
		return fmt.Errorf("config: set active: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("config: set active: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("config: set active: %w", err)
	}
	// Another writer (an operator's editor) between our read and now would
	// be undone by the rename: start over from its version instead.
	switch now, err := os.ReadFile(path); {
	case errors.Is(err, fs.ErrNotExist):
		return errChanged
	case err != nil:
		return fmt.Errorf("config: set active: %w", err)
	case !bytes.Equal(now, old):
		return errChanged
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("config: set active: %w", err)
	}
	// The rename is durable once the directory is synced; the new content
	// is in place whether or not this succeeds.
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}

// span is a byte range of a file: what to replace.
type span struct{ start, end int }

// splice replaces each span (in order, not overlapping) with text.
func splice(data []byte, spans []span, text string) []byte {
	var out bytes.Buffer
	last := 0
	for _, s := range spans {
		out.Write(data[last:s.start])
		out.WriteString(text)
		last = s.end
	}
	out.Write(data[last:])
	return out.Bytes()
}

// newline returns the file's line ending.
func newline(data []byte) string {
	if bytes.Contains(data, []byte("\r\n")) {
		return "\r\n"
	}
	return "\n"
}

// quoteJSON quotes s as a JSON string, which is also a valid YAML
// double-quoted and TOML basic string.
func quoteJSON(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return strings.TrimSuffix(b.String(), "\n")
}

// isActiveKey tells whether a key is active as viper reads it: keys are
// case-insensitive.
func isActiveKey(k string) bool { return strings.EqualFold(k, "active") }

// setYAML sets the value of the top-level active key of a YAML file, found
// with the positions yaml.v3 reports.
func setYAML(data []byte, engine string) ([]byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("%w: %w", locker.ErrInvalidArgument, err)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%w: the file is not a mapping of keys", locker.ErrInvalidArgument)
	}
	root := doc.Content[0]
	flow := root.Style&yaml.FlowStyle != 0
	lines := bytes.SplitAfter(data, []byte("\n"))
	lineStart := make([]int, len(lines))
	for i, off := 1, 0; i < len(lines); i++ {
		off += len(lines[i-1])
		lineStart[i] = off
	}
	var spans []span
	var quoted string
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		if k.Kind != yaml.ScalarNode || !isActiveKey(k.Value) {
			continue
		}
		if v.Kind != yaml.ScalarNode || v.Anchor != "" || v.Style&(yaml.TaggedStyle|yaml.LiteralStyle|yaml.FoldedStyle) != 0 ||
			v.Line < 1 || v.Line > len(lines) {
			return nil, fmt.Errorf("%w: active at line %d: want a one-line string, without anchor or tag", locker.ErrInvalidArgument, k.Line)
		}
		line := lines[v.Line-1]
		start := runeOffset(line, v.Column-1)
		end := scalarEnd(line, start, v)
		if end < 0 {
			return nil, fmt.Errorf("%w: active at line %d: want a one-line string", locker.ErrInvalidArgument, k.Line)
		}
		text, err := yamlScalar(engine, v.Style, flow)
		if err != nil {
			return nil, err
		}
		if quoted != "" && text != quoted {
			return nil, fmt.Errorf("%w: active is set twice, differently quoted", locker.ErrInvalidArgument)
		}
		quoted = text
		spans = append(spans, span{lineStart[v.Line-1] + start, lineStart[v.Line-1] + end})
	}
	if len(spans) > 0 {
		return splice(data, spans, quoted), nil
	}
	if flow {
		return nil, fmt.Errorf("%w: the file is one flow mapping without active: add it by hand", locker.ErrInvalidArgument)
	}
	text, err := yamlScalar(engine, 0, false)
	if err != nil {
		return nil, err
	}
	// At the top, or just after an explicit document start.
	at := 0
	for i, l := range lines {
		t := strings.TrimSpace(string(l))
		if t == "" || strings.HasPrefix(t, "#") || strings.HasPrefix(t, "%") {
			continue
		}
		if strings.HasPrefix(t, "---") {
			if t != "---" || !bytes.HasSuffix(l, []byte("\n")) {
				return nil, fmt.Errorf("%w: the document starts on the line of its \"---\" marker: add active by hand", locker.ErrInvalidArgument)
			}
			at = lineStart[i] + len(l)
		}
		break
	}
	return splice(data, []span{{at, at}}, "active: "+text+newline(data)), nil
}

// runeOffset returns the byte offset of the n-th character of line (yaml.v3
// counts columns in characters).
func runeOffset(line []byte, n int) int {
	off := 0
	for range n {
		if off >= len(line) {
			break
		}
		_, size := utf8.DecodeRune(line[off:])
		off += size
	}
	return off
}

// scalarEnd returns the byte offset just after the scalar v that starts at
// start in line, or -1 when it does not end on that line.
func scalarEnd(line []byte, start int, v *yaml.Node) int {
	rest := line[start:]
	switch {
	case v.Style&yaml.DoubleQuotedStyle != 0:
		for i := 1; i < len(rest); i++ {
			switch rest[i] {
			case '\\':
				i++
			case '"':
				return start + i + 1
			}
		}
	case v.Style&yaml.SingleQuotedStyle != 0:
		for i := 1; i < len(rest); i++ {
			if rest[i] == '\'' {
				if i+1 < len(rest) && rest[i+1] == '\'' {
					i++
					continue
				}
				return start + i + 1
			}
		}
	default:
		// A plain scalar on one line is its value, verbatim.
		if bytes.HasPrefix(rest, []byte(v.Value)) && v.Value != "" {
			return start + len(v.Value)
		}
	}
	return -1
}

// yamlScalar writes name as a YAML scalar: in the style of the value it
// replaces when it can, plain when name reads back as itself, else double
// quoted.
func yamlScalar(name string, style yaml.Style, flow bool) (string, error) {
	switch {
	case style&yaml.SingleQuotedStyle != 0 && !strings.ContainsAny(name, "\n\r") && printable(name):
		return "'" + strings.ReplaceAll(name, "'", "''") + "'", nil
	case style&yaml.DoubleQuotedStyle != 0:
		return quoteJSON(name), nil
	}
	var back map[string]any
	plain := !flow || !strings.ContainsAny(name, ",[]{}")
	if plain && yaml.Unmarshal([]byte("k: "+name), &back) == nil && back["k"] == name && !strings.ContainsAny(name, "\n\r\t") {
		return name, nil
	}
	return quoteJSON(name), nil
}

func printable(s string) bool {
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return false
		}
	}
	return true
}

// setTOML sets the value of the top-level active key of a TOML file, found
// with go-toml's parser (viper's), which reports the byte range of every
// string.
func setTOML(data []byte, engine string) ([]byte, error) {
	var p unstable.Parser
	p.Reset(data)
	var spans []span
	var literal bool
top:
	for p.NextExpression() {
		e := p.Expression()
		switch e.Kind {
		case unstable.Table, unstable.ArrayTable:
			break top
		case unstable.KeyValue:
			it := e.Key()
			var parts []string
			for it.Next() {
				parts = append(parts, string(it.Node().Data))
			}
			if len(parts) != 1 || !isActiveKey(parts[0]) {
				continue
			}
			v := e.Value()
			if v.Kind != unstable.String {
				return nil, fmt.Errorf("%w: active: want a string, got %s", locker.ErrInvalidArgument, v.Kind)
			}
			raw := p.Raw(v.Raw)
			literal = len(raw) > 0 && raw[0] == '\''
			spans = append(spans, span{int(v.Raw.Offset), int(v.Raw.Offset) + int(v.Raw.Length)})
		}
	}
	if err := p.Error(); err != nil {
		return nil, fmt.Errorf("%w: %w", locker.ErrInvalidArgument, err)
	}
	text := quoteJSON(engine)
	if literal && !strings.Contains(engine, "'") && printable(engine) {
		text = "'" + engine + "'"
	}
	if len(spans) > 0 {
		return splice(data, spans, text), nil
	}
	// A key before the first table is top-level: the file's top is.
	return splice(data, []span{{0, 0}}, "active = "+text+newline(data)), nil
}

// setJSON sets the value of the top-level "active" member of a JSON file,
// found with the offsets of encoding/json's decoder, so that the members'
// order and the layout stay.
func setJSON(data []byte, engine string) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, fmt.Errorf("%w: the file is not a JSON object", locker.ErrInvalidArgument)
	}
	open := int(dec.InputOffset())
	var spans []span
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("%w: %w", locker.ErrInvalidArgument, err)
		}
		key, _ := tok.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, fmt.Errorf("%w: %w", locker.ErrInvalidArgument, err)
		}
		if !isActiveKey(key) {
			continue
		}
		if len(raw) == 0 || raw[0] != '"' {
			return nil, fmt.Errorf("%w: active: want a string", locker.ErrInvalidArgument)
		}
		end := int(dec.InputOffset())
		start := end - len(raw)
		if start < open || end > len(data) || !bytes.Equal(data[start:end], raw) {
			return nil, fmt.Errorf("%w: active: cannot locate its value", locker.ErrInvalidArgument)
		}
		spans = append(spans, span{start, end})
	}
	text := quoteJSON(engine)
	if len(spans) > 0 {
		return splice(data, spans, text), nil
	}
	// The first member, laid out as the next one.
	ws := data[open : open+len(data[open:])-len(bytes.TrimLeft(data[open:], " \t\r\n"))]
	return splice(data, []span{{open, open}}, string(ws)+`"active": `+text+","), nil
}
