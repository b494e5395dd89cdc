package main

import (
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/orthrus-go/orthrus/internal/drill"
)

// printSummary writes the end-of-drill summary for the terminal.
func printSummary(w io.Writer, r *drill.Report) {
	fmt.Fprintf(w, "drill: %v, %d workers, %d names, engines %s\n",
		r.Duration.Round(time.Millisecond), r.Workers, r.Names, strings.Join(r.Engines, " → "))
	for _, m := range r.Marks {
		detail := ""
		if m.Detail != "" {
			detail = " (" + m.Detail + ")"
		}
		fmt.Fprintf(w, "  %8v  %-6s %s%s\n", m.At.Round(time.Millisecond), m.Kind, m.Label, detail)
	}
	if r.SwitchLatency >= 0 {
		fmt.Fprintf(w, "time to switch:  %v after the fault\n", r.SwitchLatency.Round(time.Millisecond))
	} else {
		fmt.Fprintln(w, "time to switch:  no switch after a fault")
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

// writeReport writes report.html (a self-contained page with an inline SVG
// timeline) and report.json (the raw figures) into dir.
func writeReport(dir string, r *drill.Report) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("--report: %w", err)
	}
	raw, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "report.json"), raw, 0o644); err != nil {
		return fmt.Errorf("--report: %w", err)
	}
	f, err := os.Create(filepath.Join(dir, "report.html"))
	if err != nil {
		return fmt.Errorf("--report: %w", err)
	}
	if err := reportPage.Execute(f, newChart(r)); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// chart is the timeline drawn in the report: acquisitions per second per
// engine, with the faults and switches marked.
type chart struct {
	R              *drill.Report
	Width, Height  int
	Left, Bottom   int
	Series         []series
	Marks          []mark
	YTicks, XTicks []tick
}

type series struct {
	Engine, Color, Points string
	LegendY               int
}

type mark struct {
	Kind, Label, Color string
	X                  float64
}

type tick struct {
	Label string
	Pos   float64
}

var palette = []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b"}

func newChart(r *drill.Report) chart {
	c := chart{R: r, Width: 900, Height: 320, Left: 60, Bottom: 280}
	plotW, plotH := float64(c.Width-c.Left-150), float64(c.Bottom-20)
	total := r.Duration.Seconds()
	if total <= 0 {
		total = 1
	}
	peak := 1.0
	for _, b := range r.Timeline {
		for _, n := range b.Acquired {
			peak = max(peak, float64(n)/r.Tick.Seconds())
		}
	}
	x := func(t time.Duration) float64 { return float64(c.Left) + t.Seconds()/total*plotW }
	y := func(rate float64) float64 { return float64(c.Bottom) - rate/peak*plotH }
	for i, e := range r.Engines {
		var pts []string
		for _, b := range r.Timeline {
			rate := float64(b.Acquired[e]) / r.Tick.Seconds()
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(b.At+r.Tick), y(rate)))
		}
		c.Series = append(c.Series, series{Engine: e, Color: palette[i%len(palette)], Points: strings.Join(pts, " "), LegendY: 30 + 20*i})
	}
	for _, m := range r.Marks {
		color := "#d62728"
		if m.Kind == "switch" {
			color = "#555555"
		}
		c.Marks = append(c.Marks, mark{Kind: m.Kind, Label: m.Label, Color: color, X: x(m.At)})
	}
	for i := 0; i <= 4; i++ {
		rate := peak * float64(i) / 4
		c.YTicks = append(c.YTicks, tick{Label: fmt.Sprintf("%.0f/s", rate), Pos: y(rate)})
	}
	step := max(1, int(total/10))
	for s := 0; s <= int(total); s += step {
		c.XTicks = append(c.XTicks, tick{Label: fmt.Sprintf("%ds", s), Pos: x(time.Duration(s) * time.Second)})
	}
	return c
}

// The page is XHTML-clean (well-formed XML) and loads nothing from outside.
var reportPage = template.Must(template.New("report").Parse(`<!DOCTYPE html>
<html xmlns="http://www.w3.org/1999/xhtml" lang="en">
<head>
<meta charset="utf-8" />
<title>orthrus drill report</title>
<style>
body { font-family: sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; }
td, th { padding: 2px 12px 2px 0; text-align: left; }
.fail { color: #d62728; font-weight: bold; }
.pass { color: #2ca02c; font-weight: bold; }
</style>
</head>
<body>
<h1>orthrus drill report</h1>
<p>Started {{.R.Started.Format "2006-01-02 15:04:05 MST"}}; {{.R.Workers}} workers on {{.R.Names}} names for {{.R.Duration}}.
{{if .R.OK}}<span class="pass">PASS</span>{{else}}<span class="fail">FAIL</span>{{end}}</p>
<svg xmlns="http://www.w3.org/2000/svg" width="{{.Width}}" height="{{.Height}}" viewBox="0 0 {{.Width}} {{.Height}}" role="img" aria-label="acquisitions per second per engine">
<line x1="{{.Left}}" y1="20" x2="{{.Left}}" y2="{{.Bottom}}" stroke="#999" />
<line x1="{{.Left}}" y1="{{.Bottom}}" x2="{{.Width}}" y2="{{.Bottom}}" stroke="#999" />
{{range .YTicks}}<text x="55" y="{{.Pos}}" font-size="11" text-anchor="end">{{.Label}}</text>
{{end}}{{range .XTicks}}<text x="{{.Pos}}" y="{{$.Bottom}}" dy="15" font-size="11" text-anchor="middle">{{.Label}}</text>
{{end}}{{range .Marks}}<g class="mark" data-kind="{{.Kind}}"><line x1="{{.X}}" y1="20" x2="{{.X}}" y2="{{$.Bottom}}" stroke="{{.Color}}" stroke-dasharray="4 3" /><text x="{{.X}}" y="15" font-size="11" fill="{{.Color}}" text-anchor="middle">{{.Kind}}: {{.Label}}</text></g>
{{end}}{{range .Series}}<polyline class="series" data-engine="{{.Engine}}" fill="none" stroke="{{.Color}}" stroke-width="2" points="{{.Points}}" />
<text x="{{$.Width}}" dx="-140" y="{{.LegendY}}" font-size="12" fill="{{.Color}}">■ {{.Engine}}</text>
{{end}}</svg>
<h2>Figures</h2>
<table>
<tr><th>time to switch</th><td>{{if ge .R.SwitchLatency 0}}{{.R.SwitchLatency}}{{else}}no switch after a fault{{end}}</td></tr>
{{range $e := .R.Engines}}<tr><th>acquisitions on {{$e}}</th><td>{{index $.R.Acquired $e}}</td></tr>
{{end}}<tr><th>failed acquisitions</th><td>{{.R.Failed}}</td></tr>
<tr><th>retried acquisitions</th><td>{{.R.Retried}}</td></tr>
<tr><th>lost holds</th><td>{{.R.Lost}}</td></tr>
<tr><th>unlock errors</th><td>{{.R.UnlockErrors}}</td></tr>
<tr><th>violations</th><td>{{len .R.Violations}}</td></tr>
</table>
{{if .R.Violations}}<h2 class="fail">Violations</h2><ul>{{range .R.Violations}}<li>{{.}}</li>{{end}}</ul>{{end}}
<h2>Events</h2>
<ul>{{range .R.Marks}}<li>{{.At}}: {{.Kind}} {{.Label}}{{if .Detail}} ({{.Detail}}){{end}}</li>{{end}}</ul>
</body>
</html>
`))
