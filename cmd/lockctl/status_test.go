package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/cmd/lockctl/internal/cfgops"
	"github.com/orthrus-go/orthrus/config"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/switcher"
)

// status puts side by side the source, each engine's health and the
// switchers the source lists, and flags those that disagree with it.
func TestStatusFleetFormatting(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	cfg := &config.Config{Active: "redis-main", Engines: []config.Engine{{Name: "redis-main"}, {Name: "etcd-backup"}}}
	st := statusReport{
		cfg:   cfg,
		where: "etcd /myapp/active",
		value: cfgops.SourceValue{Engine: "etcd-backup", Exists: true, Epoch: 7},
		engines: []cfgops.Dialed{
			{Name: "redis-main", Err: errors.New("config: engines[0] \"redis-main\" (redis): " + locker.ErrUnavailable.Error())},
			{Name: "etcd-backup", Took: 3 * time.Millisecond},
		},
		roster: true,
		members: []switcher.Member{
			{ID: "web-1:101:orders", Engine: "etcd-backup", Epoch: 7, Desired: "etcd-backup", Since: now.Add(-90 * time.Second)},
			{ID: "web-2:202:orders", Engine: "redis-main", Epoch: 6, Desired: "etcd-backup", Since: now.Add(-10 * time.Minute), Down: []string{"etcd-backup"}},
		},
		now: now,
	}
	var b strings.Builder
	err := st.print(&b)
	out := b.String()
	t.Logf("\n%s", out)
	if err == nil || !strings.Contains(err.Error(), "1 engine(s) down: redis-main") || !strings.Contains(err.Error(), "1 of 2 switcher(s) disagree") {
		t.Errorf("print() = %v; want the engine down and the disagreeing switcher", err)
	}
	for _, want := range []string{
		"source:  etcd /myapp/active: etcd-backup, epoch 7",
		"fleet:   2 switcher(s) announced",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q", want)
		}
	}
	rows := statusRows(t, out)
	if f := strings.Fields(rows["etcd-backup"]); len(f) < 4 || f[2] != "1" || f[3] != "named" || !strings.Contains(rows["etcd-backup"], "ok (3ms)") {
		t.Errorf("etcd-backup row %q; want 1 process, named, ok (3ms)", rows["etcd-backup"])
	}
	if f := strings.Fields(rows["redis-main"]); len(f) < 3 || f[2] != "1" {
		t.Errorf("redis-main row %q; want 1 process", rows["redis-main"])
	}
	if r := rows["redis-main"]; !strings.Contains(r, "DOWN") {
		t.Errorf("redis-main row %q; want DOWN", r)
	}
	if r := rowOf(out, "web-1:101:orders"); !strings.HasSuffix(strings.TrimSpace(r), "yes") || !strings.Contains(r, "1m30s ago") {
		t.Errorf("web-1 row %q; want it to agree, since 1m30s", r)
	}
	if r := rowOf(out, "web-2:202:orders"); !strings.Contains(r, "NO: on redis-main, the source names etcd-backup; epoch 6, the source's is 7") {
		t.Errorf("web-2 row %q; want it flagged: other engine, older epoch", r)
	}
	if r := rowOf(out, "web-2:202:orders"); !strings.Contains(r, " etcd-backup  ") {
		t.Errorf("web-2 row %q; want its vote: it sees etcd-backup down", r)
	}

	// A healthy fleet that agrees: exit 0.
	st.engines[0] = cfgops.Dialed{Name: "redis-main", Took: time.Millisecond}
	st.members = st.members[:1]
	b.Reset()
	if err := st.print(&b); err != nil {
		t.Errorf("print() of a healthy fleet = %v; want nil\n%s", err, b.String())
	}

	// A source that lists nobody says so, and counts no processes.
	st.roster = false
	b.Reset()
	_ = st.print(&b)
	if !strings.Contains(b.String(), "does not list the switchers") {
		t.Errorf("status without a roster:\n%s\nwant it to say the fleet is not listed", b.String())
	}
	if f := strings.Fields(statusRows(t, b.String())["etcd-backup"]); len(f) < 3 || f[2] != "unknown" {
		t.Errorf("status without a roster:\n%s\nwant the processes unknown", b.String())
	}

	// An engine that ran out of the probe's time says so.
	st.probe = time.Second
	st.engines[0] = cfgops.Dialed{Name: "redis-main", Took: time.Second, Err: errors.New("config: engines[0] \"redis-main\" (redis): " + context.DeadlineExceeded.Error())}
	b.Reset()
	_ = st.print(&b)
	if r := statusRows(t, b.String())["redis-main"]; !strings.Contains(r, "DOWN: not answering within 1s") {
		t.Errorf("redis-main row %q; want DOWN: not answering within 1s", r)
	}
}
