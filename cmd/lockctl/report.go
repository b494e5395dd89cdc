package main

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/orthrus-go/orthrus/cmd/lockctl/internal/cfgops"
	"github.com/orthrus-go/orthrus/config"
	"github.com/orthrus-go/orthrus/internal/drill"
)

// printSummary writes the end-of-drill summary for the terminal.
func printSummary(w io.Writer, r *drill.Report) {
	fmt.Fprintf(w, "drill: %v, %d workers, %d names, engines %s\n",
		drill.Round(r.Duration), r.Workers, r.Names, strings.Join(r.Engines, " → "))
	for _, m := range r.Marks {
		detail := ""
		if m.Detail != "" {
			detail = " (" + m.Detail + ")"
		}
		fmt.Fprintf(w, "  %8v  %-6s %s%s\n", drill.Round(m.At), m.Kind, m.Label, detail)
	}
	fmt.Fprintf(w, "time to switch:  %s\n", switchTime(r))
	if f := r.Fleet; f != nil {
		for _, s := range f.Switches {
			fmt.Fprintf(w, "fleet switch:    %d of %d processes followed %q; first after %v, last after %v, spread %v\n",
				s.Switched, len(f.Processes), s.Fault.Label, drill.Round(s.First-s.Fault.At), drill.Round(s.Last-s.Fault.At), drill.Round(s.Spread))
		}
		fmt.Fprintf(w, "fleet split:     %v in all, %v at most at once (processes on different engines)\n", drill.Round(f.Split), drill.Round(f.LongestSplit))
		for _, fe := range f.Fencing {
			fmt.Fprintf(w, "fenced out:      %s: %d of %d writes refused, longest %v, in all %v\n",
				fe.Process, fe.Refused, fe.Writes, drill.Round(fe.FencedOut), drill.Round(fe.FencedOutTotal))
		}
	}
	var per []string
	for _, e := range r.Engines {
		per = append(per, fmt.Sprintf("%s %d", e, r.Acquired[e]))
	}
	fmt.Fprintf(w, "acquisitions:    %s\n", strings.Join(per, ", "))
	fmt.Fprintf(w, "failed %d, retried %d, lost holds %d, unlock errors %d\n", r.Failed, r.Retried, r.Lost, r.UnlockErrors)
	for _, e := range r.Errors {
		fmt.Fprintf(w, "  failed: %s\n", e)
	}
	fmt.Fprintf(w, "violations:      %d\n", len(r.Violations))
	for _, v := range r.Violations {
		fmt.Fprintf(w, "  %s\n", v)
	}
	if r.OK() {
		fmt.Fprintln(w, "PASS")
	} else {
		fmt.Fprintln(w, "FAIL")
	}
}

// switchTime says how long the first switch took after its cause.
func switchTime(r *drill.Report) string {
	cause := "a fault"
	for _, m := range r.Marks {
		if m.Kind != drill.KindSwitch {
			cause = "the " + kindName(m.Kind)
			break
		}
	}
	if r.SwitchLatency < 0 {
		return "no switch after " + cause
	}
	return fmt.Sprintf("%v after %s", drill.Round(r.SwitchLatency), cause)
}

// figure is one row of the page's figures: a name, its value and what it
// counts.
type figure struct {
	Name, Value, Note string
}

// figures are the page's figures, each with what it counts.
func figures(r *drill.Report) []figure {
	out := []figure{{"time to switch", switchTime(r), "from the first fault or planned switch to the first switch of the switcher (of any process, in a fleet) after it"}}
	for _, e := range r.Engines {
		out = append(out, figure{"acquisitions on " + e, fmt.Sprint(r.Acquired[e]), "locks granted by " + e})
	}
	return append(out,
		figure{"failed acquisitions", fmt.Sprint(r.Failed), "LockCtx calls that returned an error: the caller did not get the lock (a sample is below)"},
		figure{"retried acquisitions", fmt.Sprint(r.Retried), "acquisitions that failed on an unavailable engine and that the switcher tried again, on the new current engine or the same one: the caller saw no error, only the wait"},
		figure{"lost holds", fmt.Sprint(r.Lost), "holds that their engine gave up before Unlock (Unlock returned locker.ErrLockLost): a holder that kept writing would have been unprotected"},
		figure{"unlock errors", fmt.Sprint(r.UnlockErrors), "Unlock calls that failed otherwise, mostly holds on an engine that had just stopped: they could not be released there and expire with their TTL; no other holder could take them meanwhile"},
		figure{"violations", fmt.Sprint(len(r.Violations)), "two holders of a name on one engine at once, a token that did not increase, or a hold released through another engine than the one that granted it; must be 0"},
	)
}

// configSetup names what a drill of cfg runs against: the file, the
// source, and each engine's addresses and security, never a secret.
func configSetup(cfg *config.Config) drill.Setup {
	setup := drill.Setup{Config: cfg.File(), Source: sourceWhere(cfg, cfg.File())}
	for i := range cfg.Engines {
		e := &cfg.Engines[i]
		setup.Targets = append(setup.Targets, drill.Target{Name: e.Name, Type: e.Type, Addrs: cfgops.Addrs(e), Security: cfgops.Security(e)})
	}
	return setup
}

// writeReport writes into dir report.html (a self-contained page: the
// timeline, the figures, and a check of its own labels), timeline.svg (the
// timeline alone, for documents) and report.json (the raw figures), and
// returns their paths.
func writeReport(dir string, r *drill.Report) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("--report: %w", err)
	}
	raw, err := reportJSON(r)
	if err != nil {
		return nil, err
	}
	svg := timelineSVG(r)
	var html strings.Builder
	if err := reportPage.Execute(&html, page{R: r, SVG: template.HTML(svg)}); err != nil {
		return nil, err
	}
	var paths []string
	for _, f := range []struct {
		name string
		data []byte
	}{
		{"report.html", []byte(html.String())},
		{"timeline.svg", []byte(`<?xml version="1.0" encoding="UTF-8"?>` + "\n" + svg)},
		{"report.json", raw},
	} {
		path := filepath.Join(dir, f.name)
		if err := os.WriteFile(path, f.data, 0o644); err != nil {
			return nil, fmt.Errorf("--report: %w", err)
		}
		paths = append(paths, path)
	}
	return paths, nil
}

// reportJSON is report.json: r as encoding/json writes it, but with every
// time.Duration as a float of milliseconds under its name with "_ms"
// ("switch_latency_ms": 2.013), exact to the nanosecond, and every list
// and map [] or {} when empty, never null, for readers in any language.
func reportJSON(r *drill.Report) ([]byte, error) {
	var b bytes.Buffer
	if err := appendJSON(&b, reflect.ValueOf(r)); err != nil {
		return nil, err
	}
	var out bytes.Buffer
	if err := json.Indent(&out, b.Bytes(), "", "  "); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

var durationType = reflect.TypeFor[time.Duration]()

// appendJSON writes v to b as reportJSON describes.
func appendJSON(b *bytes.Buffer, v reflect.Value) error {
	switch {
	case v.Type() == durationType:
		b.WriteString(strconv.FormatFloat(float64(v.Int())/1e6, 'f', -1, 64))
		return nil
	case v.Kind() == reflect.Pointer && !v.IsNil():
		return appendJSON(b, v.Elem())
	case v.Kind() == reflect.Map && v.IsNil():
		b.WriteString("{}")
		return nil
	case v.Kind() == reflect.Slice:
		b.WriteByte('[')
		for i := range v.Len() {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := appendJSON(b, v.Index(i)); err != nil {
				return err
			}
		}
		b.WriteByte(']')
		return nil
	case v.Kind() == reflect.Struct && v.Type() != reflect.TypeFor[time.Time]():
		b.WriteByte('{')
		n := 0
		for i := range v.NumField() {
			f, fv := v.Type().Field(i), v.Field(i)
			name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
			name = cmp.Or(name, f.Name)
			if !f.IsExported() || name == "-" || (opts == "omitempty" && fv.IsZero()) ||
				(opts == "omitempty" && fv.Kind() == reflect.Slice && fv.Len() == 0) {
				continue
			}
			if f.Type == durationType {
				name += "_ms"
			}
			if n > 0 {
				b.WriteByte(',')
			}
			n++
			fmt.Fprintf(b, "%q:", name)
			if err := appendJSON(b, fv); err != nil {
				return err
			}
		}
		b.WriteByte('}')
		return nil
	}
	raw, err := json.Marshal(v.Interface())
	b.Write(raw)
	return err
}

type page struct {
	R   *drill.Report
	SVG template.HTML // built by timelineSVG, escaped there
}

// The page is XHTML-clean (well-formed XML) and loads nothing from outside.
// Its script checks the drawing as a browser lays it out — no two labels
// overlap, no mark line crosses a label, no series is empty or NaN — and
// writes the verdict into body's data-check attribute, out of the reader's
// sight, for the report's browser test.
var reportPage = template.Must(template.New("report").Funcs(template.FuncMap{"round": drill.Round, "figures": figures}).Parse(`<!DOCTYPE html>
<html xmlns="http://www.w3.org/1999/xhtml" lang="en">
<head>
<meta charset="utf-8" />
<title>orthrus drill report</title>
<style>
body { font-family: sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; margin-bottom: 1em; }
td, th { padding: 2px 14px 2px 0; text-align: left; vertical-align: top; }
td.n { text-align: right; }
td.note { color: #555; font-size: 90%; max-width: 46em; }
.fail { color: #d62728; font-weight: bold; }
.pass { color: #2ca02c; font-weight: bold; }
</style>
</head>
<body>
<h1>orthrus drill report</h1>
<p>Started {{.R.Started.Format "2006-01-02 15:04:05 MST"}}; {{.R.Workers}} workers{{with .R.Fleet}} in {{len .Processes}} processes{{end}} on {{.R.Names}} names for {{round .R.Duration}}; engines in order: {{range $i, $e := .R.Engines}}{{if $i}}, {{end}}{{$e}}{{end}}.
{{if .R.OK}}<span class="pass">PASS</span>{{else}}<span class="fail">FAIL</span>{{end}}</p>
<p>Drilled: {{with .R.Setup.Config}}config {{.}}{{else}}engines started by lockctl (no --config){{end}}{{with .R.Setup.Source}}, source {{.}}{{end}}.</p>
{{with .R.Setup.Targets}}<table>
<tr><th>engine</th><th>type</th><th>addresses</th><th>security</th></tr>
{{range .}}<tr><td>{{.Name}}</td><td>{{.Type}}</td><td>{{range $i, $a := .Addrs}}{{if $i}}, {{end}}{{$a}}{{else}}in memory{{end}}</td><td>{{.Security}}</td></tr>
{{end}}</table>{{end}}
{{.SVG}}
<h2>Figures</h2>
<table>
{{range figures .R}}<tr><th>{{.Name}}</th><td class="n">{{.Value}}</td><td class="note">{{.Note}}</td></tr>
{{end}}</table>
{{with .R.Fleet}}<h2>Fleet</h2>
<table>
<tr><th>fault or planned switch</th><th>processes that followed</th><th>first</th><th>last</th><th>spread</th></tr>
{{range .Switches}}<tr><td>{{.Fault.Label}} at {{round .Fault.At}}</td><td class="n">{{.Switched}} of {{len $.R.Fleet.Processes}}</td><td>{{round .First}}</td><td>{{round .Last}}</td><td>{{round .Spread}}</td></tr>
{{end}}</table>
<p>Processes on different engines: {{round .Split}} in all, {{round .LongestSplit}} at most at once.</p>
<table>
<tr><th>process</th><th>writes</th><th>refused by the fenced resource</th><th>longest fenced out</th><th>fenced out in all</th></tr>
{{range .Fencing}}<tr><td>{{.Process}}</td><td class="n">{{.Writes}}</td><td class="n">{{.Refused}}</td><td>{{round .FencedOut}}</td><td>{{round .FencedOutTotal}}</td></tr>
{{end}}</table>
{{end}}{{if .R.Violations}}<h2 class="fail">Violations</h2><ul>{{range .R.Violations}}<li>{{.}}</li>{{end}}</ul>{{end}}
{{if .R.Errors}}<h2>Failed acquisitions (sample)</h2><ul>{{range .R.Errors}}<li>{{.}}</li>{{end}}</ul>{{end}}
<h2>Events</h2>
<ul>{{range .R.Marks}}<li>{{round .At}}: {{.Kind}} {{.Label}}{{if .Detail}} ({{.Detail}}){{end}}</li>{{end}}</ul>
<script>
(function () {
  // No "<" or "&" here: the page stays well-formed XML.
  var problems = [];
  var svg = document.getElementById("timeline");
  var outer = svg.getBoundingClientRect();
  var texts = Array.prototype.slice.call(svg.querySelectorAll("text"));
  var boxes = texts.map(function (t) { return t.getBoundingClientRect(); });
  var overlap = function (a, b) {
    var x = Math.min(a.right, b.right) - Math.max(a.left, b.left);
    var y = Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top);
    return x > 0.5 ? y > 0.5 : false;
  };
  var lines = Array.prototype.slice.call(svg.querySelectorAll("line.mark")).map(function (l) { return l.getBoundingClientRect(); });
  texts.forEach(function (t, i) {
    var a = boxes[i];
    lines.forEach(function (l) {
      var y = Math.min(a.bottom, l.bottom) - Math.max(a.top, l.top);
      if (l.left > a.left + 0.5 ? a.right - 0.5 > l.left : false) {
        if (y > 0.5) { problems.push("line over label: \"" + t.textContent + "\""); }
      }
    });
    if (a.width === 0 || outer.left - 0.5 > a.left || a.right > outer.right + 0.5 || outer.top - 0.5 > a.top || a.bottom > outer.bottom + 0.5) {
      problems.push("label outside the drawing: " + t.textContent);
    }
    texts.slice(i + 1).forEach(function (u, k) {
      if (overlap(a, boxes[i + 1 + k])) {
        problems.push("labels overlap: \"" + t.textContent + "\" and \"" + u.textContent + "\"");
      }
    });
  });
  var series = svg.querySelectorAll("polyline.series");
  if (series.length === 0) { problems.push("no series"); }
  Array.prototype.forEach.call(series, function (p) {
    var pts = (p.getAttribute("points") || "").trim();
    if (pts === "" || 2 > pts.split(/\s+/).length) { problems.push("empty series: " + p.getAttribute("data-name")); }
  });
  if (svg.outerHTML.indexOf("NaN") >= 0 || svg.outerHTML.indexOf("Infinity") >= 0) { problems.push("NaN or Infinity in the drawing"); }
  document.body.setAttribute("data-check", problems.length ? "FAIL\n" + problems.join("\n") : "OK: " + texts.length + " labels, " + series.length + " series");
})();
</script>
</body>
</html>
`))
