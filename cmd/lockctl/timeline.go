package main

import (
	"fmt"
	"html"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/orthrus-go/orthrus/internal/drill"
)

// The timeline's layout, in pixels: panels share one time axis.
const (
	tlWidth   = 980
	tlLeft    = 150 // band labels right-aligned before it
	tlRight   = 160 // legends after the plot
	tlPlotW   = tlWidth - tlLeft - tlRight
	tlRowH    = 15  // one row of mark labels, or one band
	tlCharW   = 6.6 // width of one character at 11px, generously
	tlPanelH  = 120 // a line chart
	tlPanelGp = 34  // between panels: axis labels and the next title
)

var (
	engineColors  = []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b"}
	breakerColors = map[string]string{"closed": "#8fd18f", "half-open": "#ffd24d", "open": "#e05555"}
)

// svgWriter builds the timeline.
type svgWriter struct {
	b     strings.Builder
	total time.Duration
}

func (w *svgWriter) x(t time.Duration) float64 {
	t = min(max(t, 0), w.total)
	return tlLeft + float64(t)/float64(w.total)*tlPlotW
}

func (w *svgWriter) printf(format string, args ...any) { fmt.Fprintf(&w.b, format, args...) }

func textWidth(s string) float64 { return float64(utf8.RuneCountInString(s)) * tlCharW }

// timelineSVG draws a drill: the faults and switches, acquisitions per
// second per engine, acquisition latency p50/p99, failed acquisitions,
// and, for every process, the engine it was on and each engine's breaker,
// tick by tick. Engines are in the configuration's order.
func timelineSVG(r *drill.Report) string {
	w := &svgWriter{total: max(r.Duration, time.Millisecond)}
	tick := max(r.Tick, time.Millisecond)
	var body strings.Builder

	marks, rows := w.placeMarks(r.Marks)
	w.markLabels(&body, marks)
	top := 8 + float64(rows)*tlRowH + 4

	// The mark lines cross the plots only, not their titles and axes.
	var plots [][2]float64
	y := top + 14
	w.ratePanel(&body, r, tick, y)
	plots = append(plots, [2]float64{y, y + tlPanelH})
	y += tlPanelH + tlPanelGp
	w.latencyPanel(&body, r, tick, y)
	plots = append(plots, [2]float64{y, y + tlPanelH})
	y += tlPanelH + tlPanelGp
	bottom := w.failurePanel(&body, r, tick, y)
	plots = append(plots, [2]float64{y, bottom})
	y = bottom + tlPanelGp
	bottom = w.bandsPanel(&body, r, tick, y)
	plots = append(plots, [2]float64{y, bottom})
	w.markLines(&body, marks, plots)
	y = bottom
	height := y + 24

	w.printf(`<svg xmlns="http://www.w3.org/2000/svg" id="timeline" width="%d" height="%.0f" viewBox="0 0 %d %.0f" font-family="sans-serif" role="img" aria-label="drill timeline">`+"\n",
		tlWidth, height, tlWidth, height)
	w.printf(`<rect width="100%%" height="100%%" fill="#ffffff" />` + "\n")
	w.b.WriteString(body.String())
	w.b.WriteString("</svg>\n")
	return w.b.String()
}

// placedMark is a mark with its line's x and its label's place and text.
type placedMark struct {
	m      drill.Mark
	x      float64
	row    int
	anchor string
	lx     float64
	label  string
}

// placeMarks puts the mark labels in rows, so that none overlaps another:
// each goes in the first row where it fits, left of its line when it would
// run off. A label sits next to a tick at its line's x and says when its
// mark happened, as marks a few milliseconds apart share one x. It returns
// the marks placed and the number of rows.
func (w *svgWriter) placeMarks(ms []drill.Mark) ([]placedMark, int) {
	var marks []placedMark
	var rowEnd []float64
	for i, m := range ms {
		label := markLabel(ms, i)
		x := w.x(m.At)
		// The row is taken from the tick at x to the end of the label.
		lx, anchor, from := x+3, "start", x-1
		if lx+textWidth(label) > tlWidth-2 {
			lx, anchor, from = x-3, "end", x-3-textWidth(label)
		}
		row := 0
		for row < len(rowEnd) && rowEnd[row]+8 > from {
			row++
		}
		if row == len(rowEnd) {
			rowEnd = append(rowEnd, 0)
		}
		rowEnd[row] = max(x+1, from+textWidth(label))
		marks = append(marks, placedMark{m, x, row, anchor, lx, label})
	}
	return marks, len(rowEnd)
}

// markLabel is the label of ms[i]: a fault or planned switch with its
// offset, a switch right after one with its delay.
func markLabel(ms []drill.Mark, i int) string {
	m := ms[i]
	if m.Kind == drill.KindSwitch && i > 0 && ms[i-1].Kind != drill.KindSwitch {
		return fmt.Sprintf("switch %v after the %s: %s", drill.Round(m.At-ms[i-1].At), kindName(ms[i-1].Kind), m.Label)
	}
	return fmt.Sprintf("%s at %v: %s", m.Kind, drill.Round(m.At), m.Label)
}

// kindName names a mark's kind in a sentence.
func kindName(kind string) string {
	if kind == drill.KindPlanned {
		return "planned switch"
	}
	return kind
}

// markColor is a fault's red, a planned switch's purple or a switch's
// grey.
func markColor(m drill.Mark) string {
	switch m.Kind {
	case drill.KindSwitch:
		return "#444"
	case drill.KindPlanned:
		return "#9467bd"
	}
	return "#d62728"
}

// markLabels writes the mark labels above the panels, each after a tick.
func (w *svgWriter) markLabels(body *strings.Builder, marks []placedMark) {
	for _, p := range marks {
		base := 8 + float64(p.row+1)*tlRowH - 4
		fmt.Fprintf(body, `<line class="mark" x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2" />`+"\n",
			p.x, base-10, p.x, base+2, markColor(p.m))
		w.textTo(body, p.lx, base, p.anchor, markColor(p.m), p.label)
	}
}

// markLines draws each mark's line down each plot.
func (w *svgWriter) markLines(body *strings.Builder, marks []placedMark, plots [][2]float64) {
	for _, p := range marks {
		for _, span := range plots {
			fmt.Fprintf(body, `<line class="mark" x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-dasharray="4 3" />`+"\n",
				p.x, span[0], p.x, span[1], markColor(p.m))
		}
	}
}

// ratePanel draws acquisitions per second per engine, with its top at y.
func (w *svgWriter) ratePanel(body *strings.Builder, r *drill.Report, tick time.Duration, y float64) {
	w.panelTitle(body, y-4, "acquisitions per second, per engine")
	peak := 1.0
	for _, b := range r.Timeline {
		for _, n := range b.Acquired {
			peak = max(peak, float64(n)/w.width(b, tick).Seconds())
		}
	}
	peak = niceCeil(peak)
	var legend []string
	for i, e := range r.Engines {
		color := engineColors[i%len(engineColors)]
		var pts []string
		for _, b := range r.Timeline {
			rate := float64(b.Acquired[e]) / w.width(b, tick).Seconds()
			pts = append(pts, w.point(b.At+tick, y, rate, peak))
		}
		fmt.Fprintf(body, `<polyline class="series" data-name="%s" data-engine="%s" fill="none" stroke="%s" stroke-width="2" points="%s" />`+"\n",
			html.EscapeString(e), html.EscapeString(e), color, strings.Join(pts, " "))
		legend = append(legend, e)
	}
	w.legend(body, y, legend, engineColors)
	w.axes(body, y, peak, func(v float64) string { return fmt.Sprintf("%.0f/s", v) })
}

// latencyPanel draws the acquisition latency p50 and p99, with its top at
// y.
func (w *svgWriter) latencyPanel(body *strings.Builder, r *drill.Report, tick time.Duration, y float64) {
	w.panelTitle(body, y-4, "acquisition latency (call to grant)")
	lpeak := 0.001
	for _, b := range r.Timeline {
		lpeak = max(lpeak, b.P99.Seconds()*1000)
	}
	lpeak = niceCeil(lpeak)
	lineColors := []string{"#1f77b4", "#d62728"}
	for i, q := range []string{"p50", "p99"} {
		var pts []string
		for _, b := range r.Timeline {
			v := b.P50
			if q == "p99" {
				v = b.P99
			}
			if v > 0 {
				pts = append(pts, w.point(b.At+tick/2, y, v.Seconds()*1000, lpeak))
			}
		}
		if len(pts) == 1 {
			pts = append(pts, pts[0])
		}
		fmt.Fprintf(body, `<polyline class="series" data-name="latency %s" fill="none" stroke="%s" stroke-width="1.5" points="%s" />`+"\n",
			q, lineColors[i], strings.Join(pts, " "))
	}
	w.legend(body, y, []string{"p50", "p99"}, lineColors)
	w.axes(body, y, lpeak, formatMillis)
}

// failurePanel draws failed acquisitions per second as bars, with its top
// at y, and returns its bottom.
func (w *svgWriter) failurePanel(body *strings.Builder, r *drill.Report, tick time.Duration, y float64) float64 {
	const errH = 60.0
	epeak := 0.0
	for _, b := range r.Timeline {
		epeak = max(epeak, float64(b.Failed)/w.width(b, tick).Seconds())
	}
	if epeak == 0 {
		// In the title, where no mark line crosses it.
		w.panelTitle(body, y-4, "failed acquisitions per second: none")
		epeak = 1
	} else {
		w.panelTitle(body, y-4, "failed acquisitions per second")
		epeak = niceCeil(epeak)
		for _, b := range r.Timeline {
			if b.Failed == 0 {
				continue
			}
			h := float64(b.Failed) / w.width(b, tick).Seconds() / epeak * errH
			x0, x1 := w.x(b.At), w.x(b.At+tick)
			fmt.Fprintf(body, `<rect class="errors" x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#d62728" />`+"\n", x0, y+errH-h, max(x1-x0-0.5, 0.5), h)
		}
	}
	w.axesH(body, y, errH, epeak, func(v float64) string { return fmt.Sprintf("%.0f/s", v) }, 1)
	return y + errH
}

// bandsPanel draws, per process, its current engine, then each engine's
// breaker, one band each, with its top at y, and returns its bottom.
func (w *svgWriter) bandsPanel(body *strings.Builder, r *drill.Report, tick time.Duration, y float64) float64 {
	lanes := []*drill.Report{r}
	if r.Fleet != nil {
		lanes = r.Fleet.Processes
	}
	w.panelTitle(body, y-4, "engine in use, and each engine's breaker")
	for _, lane := range lanes {
		name := lane.Process
		if name != "" {
			name += " "
		}
		w.band(body, y, name+"engine", lane, tick, func(b drill.Bucket) (string, string) {
			for i, e := range r.Engines {
				if e == b.Current {
					return e, engineColors[i%len(engineColors)]
				}
			}
			return "", ""
		})
		y += tlRowH
		for i, e := range r.Engines {
			w.band(body, y, name+"breaker "+e, lane, tick, func(b drill.Bucket) (string, string) {
				if i < len(b.Breakers) {
					return b.Breakers[i], breakerColors[b.Breakers[i]]
				}
				return "", ""
			})
			y += tlRowH
		}
		y += 4
	}
	w.legend(body, y-float64(len(lanes))*(tlRowH*float64(1+len(r.Engines))+4),
		[]string{"closed", "half-open", "open"}, []string{breakerColors["closed"], breakerColors["half-open"], breakerColors["open"]})
	w.xAxis(body, y+2)
	return y
}

// width is how long bucket b lasted: a tick, or less for the last one.
func (w *svgWriter) width(b drill.Bucket, tick time.Duration) time.Duration {
	return max(min(tick, w.total-b.At), tick/10)
}

func (w *svgWriter) point(t time.Duration, top, v, peak float64) string {
	return fmt.Sprintf("%.1f,%.1f", w.x(t), top+tlPanelH-v/peak*tlPanelH)
}

func (w *svgWriter) panelTitle(b *strings.Builder, y float64, title string) {
	fmt.Fprintf(b, `<text x="%d" y="%.1f" font-size="11" font-weight="bold" fill="#333">%s</text>`+"\n", tlLeft, y, html.EscapeString(title))
}

// textTo writes a label; s is escaped.
func (w *svgWriter) textTo(b *strings.Builder, x, y float64, anchor, color, s string) {
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" font-size="11" text-anchor="%s" fill="%s">%s</text>`+"\n", x, y, anchor, color, html.EscapeString(s))
}

// legend lists names with their colours right of the plot.
func (w *svgWriter) legend(b *strings.Builder, top float64, names, colors []string) {
	for i, n := range names {
		y := top + 10 + float64(i)*tlRowH
		fmt.Fprintf(b, `<rect x="%d" y="%.1f" width="10" height="10" fill="%s" />`+"\n", tlLeft+tlPlotW+12, y-9, colors[i%len(colors)])
		w.textTo(b, tlLeft+tlPlotW+26, y, "start", "#222", n)
	}
}

// axes draws a line chart's axes with 4 ticks up to peak.
func (w *svgWriter) axes(b *strings.Builder, top, peak float64, format func(float64) string) {
	w.axesH(b, top, tlPanelH, peak, format, 4)
	w.xAxis(b, top+tlPanelH)
}

func (w *svgWriter) axesH(b *strings.Builder, top, h, peak float64, format func(float64) string, ticks int) {
	fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#999" />`+"\n", tlLeft, top, tlLeft, top+h)
	fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#999" />`+"\n", tlLeft, top+h, tlLeft+tlPlotW, top+h)
	for i := 0; i <= ticks; i++ {
		v := peak * float64(i) / float64(ticks)
		y := top + h - v/peak*h
		if i == 0 {
			continue // the time axis's first label is there
		}
		fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#eee" />`+"\n", tlLeft+1, y, tlLeft+tlPlotW, y)
		w.textTo(b, tlLeft-5, y+4, "end", "#555", format(v))
	}
}

// xAxis labels the time axis under a panel at y.
func (w *svgWriter) xAxis(b *strings.Builder, y float64) {
	step := niceStep(w.total)
	for t := time.Duration(0); t <= w.total; t += step {
		w.textTo(b, w.x(t), y+13, "middle", "#555", drill.Round(t).String())
	}
}

// band draws one row of coloured segments, one per run of ticks with the
// same value.
func (w *svgWriter) band(b *strings.Builder, y float64, label string, lane *drill.Report, tick time.Duration, value func(drill.Bucket) (string, string)) {
	w.textTo(b, tlLeft-5, y+11, "end", "#333", label)
	tl := lane.Timeline
	for i := 0; i < len(tl); {
		v, color := value(tl[i])
		j := i + 1
		for j < len(tl) {
			if next, _ := value(tl[j]); next != v {
				break
			}
			j++
		}
		if color != "" {
			x0, x1 := w.x(tl[i].At), w.x(tl[j-1].At+tick)
			fmt.Fprintf(b, `<rect class="band" x="%.1f" y="%.1f" width="%.1f" height="%d" fill="%s"><title>%s: %s</title></rect>`+"\n",
				x0, y+1, max(x1-x0, 0.5), tlRowH-3, color, html.EscapeString(label), html.EscapeString(v))
		}
		i = j
	}
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

// niceStep picks the time axis step: at most 10 labels.
func niceStep(total time.Duration) time.Duration {
	for _, s := range []time.Duration{100 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond,
		time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 15 * time.Second, 30 * time.Second,
		time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute, 15 * time.Minute, 30 * time.Minute} {
		if total/s <= 10 {
			return s
		}
	}
	return time.Hour
}

func formatMillis(v float64) string {
	if v == 0 {
		return "0"
	}
	// Exact quarters of a nice peak: 3.75 and 12.5, not a rounded 3.8 and 12.
	return strconv.FormatFloat(math.Round(v*1000)/1000, 'f', -1, 64) + " ms"
}
