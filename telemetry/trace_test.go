package telemetry_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/switcher"
)

func attr(s sdktrace.ReadOnlySpan, k attribute.Key) attribute.Value {
	for _, kv := range s.Attributes() {
		if kv.Key == k {
			return kv.Value
		}
	}
	return attribute.Value{}
}

// TestMovedWaitSpan moves a waiting acquisition with a switch and checks
// its trace: the switcher's span with the move as an event and a link to
// the switch's span, one child span per engine it waited on, the release.
// While it waits, the waiters gauge counts it.
func TestMovedWaitSpan(t *testing.T) {
	r := newRig(t)
	a := newEngine(t, newClient(t, redisA), "redis-a", r)
	b := newEngine(t, newClient(t, redisB), "redis-b", r)
	sw, err := switcher.New([]locker.Engine{a, b}, switcher.WithName("sw"), switcher.WithObserver(r))
	if err != nil {
		t.Fatalf("switcher.New() = %v", err)
	}
	defer sw.Close()

	holder, waiter := newLocker(t, sw, "x"), newLocker(t, sw, "x")
	if err := holder.Lock(); err != nil {
		t.Fatalf("Lock() = %v", err)
	}
	defer holder.Unlock()
	// Drain the holder's own acquisition events.
	for range 2 {
		await(t, r.started, "holder's acquisition")
	}

	ctx, parent := r.tp.Tracer("test").Start(context.Background(), "request")
	done := make(chan error, 1)
	go func() { done <- waiter.LockCtx(ctx) }()
	// Through the switcher a waiter first tries once, then waits: the wait
	// is its second acquisition on redis-a.
	for n := 0; n < 2; {
		if a := await(t, r.started, "waiter's acquisition"); a.Engine == "redis-a" {
			n++
		}
	}
	got := r.gather(t)
	if k := `orthrus_lock_waiters{engine="redis-a"}`; got[k] != 1 {
		t.Errorf("%s while waiting = %v; want 1", k, got[k])
	}
	if _, err := sw.SwitchEngine(); err != nil {
		t.Fatalf("SwitchEngine() = %v", err)
	}
	if err := await(t, done, "moved LockCtx"); err != nil {
		t.Fatalf("LockCtx() = %v", err)
	}
	if err := waiter.Unlock(); err != nil {
		t.Fatalf("Unlock() = %v", err)
	}
	parent.End()

	var swSpan, switchSpan sdktrace.ReadOnlySpan
	spans := r.spans.Ended()
	for _, s := range spans {
		switch {
		case s.Name() == "orthrus.switch":
			switchSpan = s
		case s.Name() == "orthrus.lock.acquire" && s.Parent().SpanID() == parent.SpanContext().SpanID():
			swSpan = s
		}
	}
	if switchSpan == nil || swSpan == nil {
		t.Fatalf("spans: switch %v, switcher's acquisition %v; want both", switchSpan, swSpan)
	}
	var onA, onB, release []sdktrace.ReadOnlySpan
	for _, s := range spans {
		switch {
		case s.Name() == "orthrus.lock.acquire" && s.Parent().SpanID() == swSpan.SpanContext().SpanID():
			if attr(s, "orthrus.engine").AsString() == "redis-a" {
				onA = append(onA, s)
			} else {
				onB = append(onB, s)
			}
		case s.Name() == "orthrus.lock.release":
			release = append(release, s)
		}
	}
	if got := attr(switchSpan, "orthrus.switch.reason").AsString(); got != "manual" {
		t.Errorf("switch span reason = %q; want manual", got)
	}
	if got, want := attr(swSpan, "orthrus.lock.result").AsString(), "granted"; got != want {
		t.Errorf("switcher's span result = %q; want %q", got, want)
	}
	if got := attr(swSpan, "orthrus.engine").AsString(); got != "redis-b" {
		t.Errorf("switcher's span engine = %q; want redis-b", got)
	}
	var moved bool
	for _, ev := range swSpan.Events() {
		moved = moved || ev.Name == "orthrus.lock.moved"
	}
	if !moved {
		t.Errorf("switcher's span events = %v; want orthrus.lock.moved", swSpan.Events())
	}
	if links := swSpan.Links(); len(links) != 1 || links[0].SpanContext.SpanID() != switchSpan.SpanContext().SpanID() {
		t.Errorf("switcher's span links = %v; want one, to the switch span %v", links, switchSpan.SpanContext().SpanID())
	}
	// The engine spans are children of the switcher's: on redis-a one
	// contended try, then a wait cancelled when the switch moved it;
	// granted on redis-b.
	check := func(spans []sdktrace.ReadOnlySpan, engine, result string) {
		t.Helper()
		if len(spans) != 1 {
			t.Errorf("%d acquisition spans on %s; want 1", len(spans), engine)
			return
		}
		s := spans[0]
		if s.Parent().SpanID() != swSpan.SpanContext().SpanID() || s.SpanKind() != trace.SpanKindClient {
			t.Errorf("%s span: parent %v kind %v; want the switcher's span, client", engine, s.Parent().SpanID(), s.SpanKind())
		}
		if got := attr(s, "orthrus.lock.result").AsString(); got != result {
			t.Errorf("%s span result = %q; want %q", engine, got, result)
		}
	}
	if len(onA) == 2 {
		check(onA[:1], "redis-a", "contended")
		onA = onA[1:]
	}
	check(onA, "redis-a", "cancelled")
	check(onB, "redis-b", "granted")
	if len(onB) == 1 {
		tok, engTok := uint64(attr(swSpan, "orthrus.lock.token").AsInt64()), uint64(attr(onB[0], "orthrus.lock.token").AsInt64())
		if tok>>44 != 1 || tok&(1<<44-1) != engTok || engTok == 0 {
			t.Errorf("tokens: switcher's span %#x, engine's %#x; want epoch 1 above the engine's token", tok, engTok)
		}
	}
	if len(release) != 1 || attr(release[0], "orthrus.engine").AsString() != "redis-b" ||
		attr(release[0], "orthrus.lock.result").AsString() != "released" || release[0].Status().Code == codes.Error {
		t.Errorf("release spans = %v; want one on redis-b, released", release)
	}
}

// TestSpanAttributes checks every attribute of the acquisition, release
// and lost-hold spans of one engine: a wait granted, a try contended, a
// release, and a hold whose key was deleted (its release finds it lost).
func TestSpanAttributes(t *testing.T) {
	r := newRig(t)
	c := newClient(t, redisA)
	e := newEngine(t, c, "redis-a", r)
	defer e.Close()
	holder := newLocker(t, e, "x", locker.WithOwner("holder"))
	other := newLocker(t, e, "x", locker.WithOwner("other"))
	if err := holder.Lock(); err != nil {
		t.Fatalf("Lock() = %v", err)
	}
	granted := holder.(locker.Lease).Token()
	if ok, err := other.TryLock(); ok || err != nil {
		t.Fatalf("TryLock() = %v, %v; want false, nil", ok, err)
	}
	if err := holder.Unlock(); err != nil {
		t.Fatalf("Unlock() = %v", err)
	}
	gone := newLocker(t, e, "gone", locker.WithOwner("holder"))
	if ok, err := gone.TryLock(); !ok || err != nil {
		t.Fatalf("TryLock() = %v, %v; want true, nil", ok, err)
	}
	goneToken := gone.(locker.Lease).Token()
	if err := c.Del(context.Background(), e.LockKey("gone")).Err(); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	if err := gone.Unlock(); !errors.Is(err, locker.ErrLockLost) {
		t.Fatalf("Unlock() = %v; want ErrLockLost", err)
	}

	type want struct {
		name   string
		kind   trace.SpanKind
		status codes.Code
		attrs  map[string]string
	}
	tok := func(t uint64) string { return fmt.Sprint(t) }
	wants := []want{
		{"orthrus.lock.acquire", trace.SpanKindClient, codes.Unset, map[string]string{
			"orthrus.engine": "redis-a", "orthrus.lock.name": "x", "orthrus.lock.owner": "holder",
			"orthrus.lock.wait": "true", "orthrus.lock.result": "granted", "orthrus.lock.token": tok(granted)}},
		{"orthrus.lock.acquire", trace.SpanKindClient, codes.Unset, map[string]string{
			"orthrus.engine": "redis-a", "orthrus.lock.name": "x", "orthrus.lock.owner": "other",
			"orthrus.lock.wait": "false", "orthrus.lock.result": "contended"}},
		{"orthrus.lock.release", trace.SpanKindClient, codes.Unset, map[string]string{
			"orthrus.engine": "redis-a", "orthrus.lock.name": "x", "orthrus.lock.owner": "holder",
			"orthrus.lock.token": tok(granted), "orthrus.lock.result": "released"}},
		{"orthrus.lock.acquire", trace.SpanKindClient, codes.Unset, map[string]string{
			"orthrus.engine": "redis-a", "orthrus.lock.name": "gone", "orthrus.lock.owner": "holder",
			"orthrus.lock.wait": "false", "orthrus.lock.result": "granted", "orthrus.lock.token": tok(goneToken)}},
		// The release ends before the hold is reported lost.
		{"orthrus.lock.release", trace.SpanKindClient, codes.Error, map[string]string{
			"orthrus.engine": "redis-a", "orthrus.lock.name": "gone", "orthrus.lock.owner": "holder",
			"orthrus.lock.token": tok(goneToken), "orthrus.lock.result": "lost"}},
		{"orthrus.lock.lost", trace.SpanKindInternal, codes.Error, map[string]string{
			"orthrus.engine": "redis-a", "orthrus.lock.name": "gone", "orthrus.lock.owner": "holder",
			"orthrus.lock.token": tok(goneToken), "orthrus.lock.lost.cause": "gone"}},
	}
	spans := r.spans.Ended()
	if len(spans) != len(wants) {
		t.Fatalf("%d spans ended; want %d", len(spans), len(wants))
	}
	for i, w := range wants {
		s := spans[i]
		got := map[string]string{}
		for _, kv := range s.Attributes() {
			got[string(kv.Key)] = kv.Value.String()
		}
		if s.Name() != w.name || s.SpanKind() != w.kind || s.Status().Code != w.status || !maps.Equal(got, w.attrs) {
			t.Errorf("span %d = %s, %v, status %v, %v; want %s, %v, status %v, %v",
				i, s.Name(), s.SpanKind(), s.Status().Code, got, w.name, w.kind, w.status, w.attrs)
		}
	}
}
