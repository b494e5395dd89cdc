package sourcetest

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/switcher"
)

// Shared is a source that a fleet shares: it takes announcements and
// lists them.
type Shared interface {
	switcher.Announcer
	switcher.Roster
}

// Roster checks that announced Members are listed, that a new
// announcement replaces the old one, and that a retracted one goes. It
// retracts every Member it announced.
func Roster(t *testing.T, src Shared) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	since := time.Unix(1_700_000_000, 0).UTC()
	a := switcher.Member{ID: "host:1:sw:aa", Engine: "redis", Epoch: 1, Desired: "redis", Since: since, Down: []string{"etcd"}}
	b := switcher.Member{ID: "host:2:sw:bb", Engine: "etcd", Epoch: 2, Desired: "redis", Since: since}
	list := func() []switcher.Member {
		t.Helper()
		ms, err := src.Members(ctx)
		if err != nil {
			t.Fatalf("Members() = %v", err)
		}
		slices.SortFunc(ms, func(x, y switcher.Member) int { return strings.Compare(x.ID, y.ID) })
		for i := range ms {
			ms[i].Since = ms[i].Since.UTC()
		}
		return ms
	}
	if ms := list(); len(ms) != 0 {
		t.Fatalf("Members() before any announcement = %+v; want none", ms)
	}
	for _, m := range []switcher.Member{a, b} {
		if err := src.Announce(ctx, m); err != nil {
			t.Fatalf("Announce(%q) = %v", m.ID, err)
		}
	}
	a.Engine, a.Epoch = "etcd", 2
	if err := src.Announce(ctx, a); err != nil {
		t.Fatalf("Announce(%q) again = %v", a.ID, err)
	}
	if got, want := list(), []switcher.Member{a, b}; !reflect.DeepEqual(got, want) {
		t.Errorf("Members() = %+v; want %+v", got, want)
	}
	if err := src.Retract(ctx, b.ID); err != nil {
		t.Fatalf("Retract(%q) = %v", b.ID, err)
	}
	if got, want := list(), []switcher.Member{a}; !reflect.DeepEqual(got, want) {
		t.Errorf("Members() after Retract = %+v; want %+v", got, want)
	}
	if err := src.Retract(ctx, a.ID); err != nil {
		t.Fatalf("Retract(%q) = %v", a.ID, err)
	}
}
