package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/orthrus-go/orthrus/internal/drill"
)

// progress shows a drill live: one line redrawn in place on a terminal,
// a log line a second otherwise.
type progress struct {
	w        io.Writer
	terminal bool
	last     time.Duration
}

func newProgress(w io.Writer) *progress {
	p := &progress{w: w}
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			p.terminal = true
		}
	}
	return p
}

func (p *progress) show(s drill.Snapshot) {
	if !p.terminal && s.Elapsed-p.last < time.Second {
		return
	}
	p.last = s.Elapsed
	var rates, breakers []string
	for _, e := range s.Engines {
		rates = append(rates, fmt.Sprintf("%s %4.0f/s", e.Name, s.Rate[e.Name]))
		breakers = append(breakers, fmt.Sprintf("%s=%s", e.Name, e.Breaker))
	}
	line := fmt.Sprintf("%5.1fs  current %-14s  %s  failed %d  lost %d  breakers %s",
		s.Elapsed.Seconds(), s.Current, strings.Join(rates, "  "), s.Failed, s.Lost, strings.Join(breakers, " "))
	if p.terminal {
		fmt.Fprintf(p.w, "\r\033[K%s", line)
	} else {
		fmt.Fprintln(p.w, line)
	}
}
