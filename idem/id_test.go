package idem_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/idem"
	"github.com/orthrus-go/orthrus/idem/internal/idemtest"
	"github.com/orthrus-go/orthrus/locker"
)

type order struct {
	Op    string `json:"op"`
	Order int64  `json:"order"`
	Items []item `json:"items"`
}

type item struct {
	SKU string  `json:"sku"`
	Qty float64 `json:"qty"`
}

type orderReversed struct { // same fields, other declaration order
	Items []item `json:"items"`
	Order int64  `json:"order"`
	Op    string `json:"op"`
}

func TestIdentifyCanonical(t *testing.T) {
	id := func(content any) idem.ID {
		t.Helper()
		id, err := idem.Identify("app", content)
		if err != nil {
			t.Fatalf("Identify(%v): %v", content, err)
		}
		return id
	}
	s := order{Op: "pay", Order: 1 << 60, Items: []item{{"a", 1.5}}}
	same := []any{
		orderReversed{Op: "pay", Order: 1 << 60, Items: []item{{"a", 1.5}}},
		map[string]any{"order": int64(1) << 60, "op": "pay", "items": []map[string]any{{"qty": 1.5, "sku": "a"}}},
		&s,
	}
	for _, c := range same {
		if got, want := id(c), id(s); got != want {
			t.Errorf("Identify(%#v) = %v; want %v, the ID of %#v", c, got, want, s)
		}
	}
	differ := []any{
		order{Op: "pay", Order: 1<<60 + 1, Items: []item{{"a", 1.5}}}, // a large integer keeps its digits
		order{Op: "pay", Order: 1 << 60, Items: []item{{"a", 2}}},
		`{"items":[{"qty":1.5,"sku":"a"}],"op":"pay","order":1152921504606846976}`, // a string is its bytes, not a document
	}
	for _, c := range differ {
		if id(c) == id(s) {
			t.Errorf("Identify(%#v) = the ID of %#v; want another", c, s)
		}
	}
	if id("42") != id([]byte("42")) {
		t.Error(`Identify("42") != Identify([]byte("42")); want the same bytes`)
	}
	if id("42") == id(42) {
		t.Error(`Identify("42") == Identify(42); want a string and a number to differ`)
	}
	other, _ := idem.Identify("other-app", "42")
	if other == id("42") {
		t.Error("two application keys gave the same ID")
	}
	if got, err := idem.ParseID(id("42").String()); err != nil || got != id("42") {
		t.Errorf("ParseID(String()) = %v, %v; want the ID back", got, err)
	}
}

func TestBadInput(t *testing.T) {
	s := newStore(t, "redis")
	g := newGate(t, s)
	ctx := context.Background()
	rc := idemtest.RedisClient(redisAddr)
	defer rc.Close()
	cases := []struct {
		name string
		err  error
	}{
		{"empty app key", func() error { _, err := idem.New("", s); return err }()},
		{"nil store", func() error { _, err := idem.New("a", nil); return err }()},
		{"nil option", func() error { _, err := idem.New("a", s, nil); return err }()},
		{"WithExpiry(0)", func() error { _, err := idem.New("a", s, idem.WithExpiry(0)); return err }()},
		{"WithRetention(-1)", func() error { _, err := idem.New("a", s, idem.WithRetention(-1)); return err }()},
		{"retention < expiry", func() error {
			_, err := idem.New("a", s, idem.WithExpiry(time.Minute), idem.WithRetention(time.Second))
			return err
		}()},
		{"WithPolicy(7)", func() error { _, err := idem.New("a", s, idem.WithPolicy(7)); return err }()},
		{"WithRequestTimeout(0)", func() error { _, err := idem.New("a", s, idem.WithRequestTimeout(0)); return err }()},
		{"WithLogger(nil)", func() error { _, err := idem.New("a", s, idem.WithLogger(nil)); return err }()},
		{"WithMaxResult(-1)", func() error { _, err := idem.New("a", s, idem.WithMaxResult(-1)); return err }()},
		{"WithCheckPrevious(0)", func() error { _, err := idem.New("a", s, idem.WithCheckPrevious(0)); return err }()},
		{"NewSwitched nil current", func() error { _, err := idem.NewSwitched("a", nil, []idem.Store{s}); return err }()},
		{"NewSwitched no stores", func() error { _, err := idem.NewSwitched("a", func() string { return "" }, nil); return err }()},
		{"NewSwitched same names", func() error {
			_, err := idem.NewSwitched("a", func() string { return "redis" }, []idem.Store{s, s})
			return err
		}()},
		{"nil content", func() error { _, _, err := g.Begin(ctx, nil); return err }()},
		{"content not JSON", func() error { _, _, err := g.Begin(ctx, make(chan int)); return err }()},
		{"nil ctx", func() error {
			//lint:ignore SA1012 the nil is the test
			_, _, err := g.Begin(nil, "x")
			return err
		}()},
		{"empty fingerprint", func() error { _, _, err := g.Begin(ctx, "x", idem.WithFingerprint(nil)); return err }()},
		{"ParseID", func() error { _, err := idem.ParseID("zz"); return err }()},
		{"NewRedisStore(nil)", func() error { _, err := idem.NewRedisStore(nil); return err }()},
		{"NewEtcdStore(nil)", func() error { _, err := idem.NewEtcdStore(nil); return err }()},
		{"NewZKStore(nil)", func() error { _, err := idem.NewZKStore(nil, nil); return err }()},
		{"WithPrefix empty", func() error { _, err := idem.NewRedisStore(rc, idem.WithPrefix("")); return err }()},
		{"WithName empty", func() error { _, err := idem.NewRedisStore(rc, idem.WithName("")); return err }()},
	}
	for _, c := range cases {
		if !errors.Is(c.err, locker.ErrInvalidArgument) {
			t.Errorf("%s: error %v; want ErrInvalidArgument", c.name, c.err)
		}
	}

	small := newGate(t, s, idem.WithMaxResult(4))
	tk := mustRun(t, small, "big-result")
	if err := tk.Succeed(ctx, []byte("12345")); !errors.Is(err, locker.ErrInvalidArgument) {
		t.Errorf("Succeed over WithMaxResult = %v; want ErrInvalidArgument", err)
	}
	if err := tk.Succeed(ctx, []byte("1234")); err != nil {
		t.Errorf("Succeed within WithMaxResult = %v; want nil", err)
	}
}

// testLogger writes a gate's logs to the test's log.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(b), "\n"))
	return len(b), nil
}
