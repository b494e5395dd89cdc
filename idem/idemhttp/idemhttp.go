package idemhttp

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/orthrus-go/orthrus/idem"
	"github.com/orthrus-go/orthrus/locker"
)

// Header is the request header that carries the idempotency key.
const Header = "Idempotency-Key"

// ReplayedHeader marks a response replayed from the record of an earlier
// request.
const ReplayedHeader = "Idempotent-Replayed"

// Defaults of the options.
const (
	DefaultMaxBody   = 1 << 20
	DefaultMaxKeyLen = 255
)

type settings struct {
	methods   []string
	required  bool
	maxBody   int64
	maxKeyLen int
	scope     func(*http.Request) string
	failed    func(status int) bool
	notStored func(status int) bool
	bareKeys  bool
	print     func(r *http.Request, body []byte) ([]byte, error)
	onReplay  func(w http.ResponseWriter, r *http.Request, d *idem.Duplicate)
	log       *slog.Logger
}

// DefaultNotStored are the statuses WithNotStored keeps by default: a
// request refused before it ran (validation, authentication, a missing
// resource, a conflict, throttling) is not recorded, as Stripe does, so
// that the client can fix the request and send it again with the same key.
var DefaultNotStored = []int{
	http.StatusBadRequest, http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound,
	http.StatusMethodNotAllowed, http.StatusConflict, http.StatusPreconditionFailed,
	http.StatusRequestEntityTooLarge, http.StatusUnsupportedMediaType, http.StatusUnprocessableEntity,
	http.StatusPreconditionRequired, http.StatusTooManyRequests,
}

// Option configures Middleware. A bad value makes Middleware fail with an
// error wrapping locker.ErrInvalidArgument that names the option.
type Option func(*settings) error

// WithMethods sets the methods the middleware guards; requests with other
// methods pass through untouched. Default: POST and PATCH, the methods that
// are not idempotent by themselves.
func WithMethods(methods ...string) Option {
	return func(s *settings) error {
		if len(methods) == 0 || slices.Contains(methods, "") {
			return fmt.Errorf("%w: WithMethods(%q): want one or more methods", locker.ErrInvalidArgument, methods)
		}
		s.methods = methods
		return nil
	}
}

// WithRequired makes a guarded request without the header fail with 400.
// Default: such a request passes through unguarded.
func WithRequired() Option {
	return func(s *settings) error { s.required = true; return nil }
}

// WithMaxBody sets the largest request body the middleware reads (to
// fingerprint it); a larger one gets 413. Default: DefaultMaxBody (1 MiB).
func WithMaxBody(n int64) Option {
	return func(s *settings) error {
		if n < 0 {
			return fmt.Errorf("%w: WithMaxBody(%d): must not be negative", locker.ErrInvalidArgument, n)
		}
		s.maxBody = n
		return nil
	}
}

// WithMaxKeyLen sets the longest key accepted; a longer one gets 400.
// Default: DefaultMaxKeyLen (255).
func WithMaxKeyLen(n int) Option {
	return func(s *settings) error {
		if n <= 0 {
			return fmt.Errorf("%w: WithMaxKeyLen(%d): must be positive", locker.ErrInvalidArgument, n)
		}
		s.maxKeyLen = n
		return nil
	}
}

// WithScope makes keys unique per scope, for instance per authenticated
// client, so that two clients choosing the same key do not collide.
// Default: one scope for all requests.
func WithScope(scope func(*http.Request) string) Option {
	return func(s *settings) error {
		if scope == nil {
			return fmt.Errorf("%w: WithScope: func is nil", locker.ErrInvalidArgument)
		}
		s.scope = scope
		return nil
	}
}

// WithFailure sets which response statuses count as a failed operation:
// its record is deleted, so that the client's retry runs. Every other
// response is recorded and replayed to later duplicates. Default: 5xx.
func WithFailure(failed func(status int) bool) Option {
	return func(s *settings) error {
		if failed == nil {
			return fmt.Errorf("%w: WithFailure: func is nil", locker.ErrInvalidArgument)
		}
		s.failed = failed
		return nil
	}
}

// WithNotStored sets the responses that mean the handler refused the
// request before any side effect: they are sent but not recorded (the
// record is deleted), so the same key can be sent again with a fixed
// request. Give no status to record every response WithFailure does not
// count as a failure. Default: DefaultNotStored.
func WithNotStored(statuses ...int) Option {
	return func(s *settings) error {
		set := map[int]bool{}
		for _, st := range statuses {
			if st < 100 || st > 599 {
				return fmt.Errorf("%w: WithNotStored(%v): %d is not an HTTP status", locker.ErrInvalidArgument, statuses, st)
			}
			set[st] = true
		}
		s.notStored = func(status int) bool { return set[status] }
		return nil
	}
}

// WithBareKeys also accepts a key sent as a bare token (Idempotency-Key:
// abc, as Stripe's clients send it) beside the draft's structured-field
// string ("abc"); a bare key is 1 or more visible ASCII characters other
// than '"', ',' and ';'. Default: only the sf-string.
func WithBareKeys() Option {
	return func(s *settings) error { s.bareKeys = true; return nil }
}

// WithFingerprint sets what tells a retry from the key's reuse for another
// request: fp returns the bytes compared (hashed with SHA-256), from the
// request and its body (which the handler still gets). An error from fp
// answers 400. JSONFields makes one over chosen fields of a JSON body,
// leaving out volatile ones (a timestamp, a trace ID). Default: the
// method, the request URI and the whole body.
func WithFingerprint(fp func(r *http.Request, body []byte) ([]byte, error)) Option {
	return func(s *settings) error {
		if fp == nil {
			return fmt.Errorf("%w: WithFingerprint: func is nil", locker.ErrInvalidArgument)
		}
		s.print = fp
		return nil
	}
}

// WithOnReplay calls hook before a recorded response is replayed (never
// for a 409 or a 422), with the duplicate as the gate returned it (the
// record's store, when it began, the stored result): to log it, count it,
// or add headers to w.
func WithOnReplay(hook func(w http.ResponseWriter, r *http.Request, d *idem.Duplicate)) Option {
	return func(s *settings) error {
		if hook == nil {
			return fmt.Errorf("%w: WithOnReplay: hook is nil", locker.ErrInvalidArgument)
		}
		s.onReplay = hook
		return nil
	}
}

// WithLogger sets the logger of the outcomes that could not be recorded
// (the response was already sent). Default: slog.Default().
func WithLogger(l *slog.Logger) Option {
	return func(s *settings) error {
		if l == nil {
			return fmt.Errorf("%w: WithLogger: logger is nil", locker.ErrInvalidArgument)
		}
		s.log = l
		return nil
	}
}

// Middleware returns net/http middleware that runs each request carrying
// an Idempotency-Key header once, through gate.
func Middleware(gate *idem.Gate, opts ...Option) (func(http.Handler) http.Handler, error) {
	if gate == nil {
		return nil, fmt.Errorf("%w: idemhttp.Middleware: gate is nil", locker.ErrInvalidArgument)
	}
	s := settings{methods: []string{http.MethodPost, http.MethodPatch}, maxBody: DefaultMaxBody,
		maxKeyLen: DefaultMaxKeyLen, failed: func(status int) bool { return status >= 500 }, log: slog.Default(),
		print: wholeRequest}
	if err := WithNotStored(DefaultNotStored...)(&s); err != nil {
		return nil, err
	}
	for _, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("%w: idemhttp: nil Option", locker.ErrInvalidArgument)
		}
		if err := opt(&s); err != nil {
			return nil, err
		}
	}
	return func(next http.Handler) http.Handler {
		return &guard{gate: gate, s: s, next: next}
	}, nil
}

type guard struct {
	gate *idem.Gate
	s    settings
	next http.Handler
}

// problem writes an RFC 9457 problem document.
func problem(w http.ResponseWriter, status int, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"title": http.StatusText(status), "status": status, "detail": detail})
}

// parseKey parses the header's one value as an RFC 8941 sf-string (the
// draft's key), or as a bare token with WithBareKeys; ok is false for
// anything else.
func parseKey(v string, bare bool) (key string, ok bool) {
	v = strings.Trim(v, " \t")
	if v == "" {
		return "", false
	}
	if v[0] != '"' {
		if !bare {
			return "", false
		}
		for i := 0; i < len(v); i++ {
			if c := v[i]; c <= ' ' || c >= 0x7f || c == '"' || c == ',' || c == ';' {
				return "", false
			}
		}
		return v, true
	}
	var b strings.Builder
	for i := 1; i < len(v); i++ {
		switch c := v[i]; {
		case c == '\\':
			i++
			if i == len(v) || (v[i] != '"' && v[i] != '\\') {
				return "", false
			}
			b.WriteByte(v[i])
		case c == '"':
			return b.String(), i == len(v)-1 // nothing may follow the string
		case c < ' ' || c >= 0x7f:
			return "", false
		default:
			b.WriteByte(c)
		}
	}
	return "", false // no closing quote
}

// wholeRequest is the default fingerprint: method, request URI and body.
func wholeRequest(r *http.Request, body []byte) ([]byte, error) {
	b := make([]byte, 0, len(r.Method)+len(r.URL.RequestURI())+2+len(body))
	b = append(append(append(append(b, r.Method...), 0), r.URL.RequestURI()...), 0)
	return append(b, body...), nil
}

func (g *guard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !slices.Contains(g.s.methods, r.Method) {
		g.next.ServeHTTP(w, r)
		return
	}
	raw, ok := r.Header[http.CanonicalHeaderKey(Header)]
	if !ok {
		if g.s.required {
			problem(w, http.StatusBadRequest, "this request needs an "+Header+" header")
			return
		}
		g.next.ServeHTTP(w, r)
		return
	}
	content, fp, ok := g.identify(w, r, raw)
	if !ok {
		return
	}
	tk, dup, err := g.gate.Begin(r.Context(), content, idem.WithFingerprint(fp))
	switch {
	case err != nil && r.Context().Err() != nil:
		return // the client is gone
	case errors.Is(err, locker.ErrUnavailable):
		w.Header().Set("Retry-After", "1")
		problem(w, http.StatusServiceUnavailable, "the idempotency store is unavailable; retry later")
		return
	case err != nil:
		problem(w, http.StatusInternalServerError, err.Error())
		return
	case dup != nil && dup.Mismatch:
		problem(w, http.StatusUnprocessableEntity, "this "+Header+" was used for a different request")
		return
	case dup != nil && dup.State == idem.Running:
		problem(w, http.StatusConflict, "a request with this "+Header+" is being processed; retry later")
		return
	case dup != nil:
		if g.s.onReplay != nil {
			g.s.onReplay(w, r, dup)
		}
		replay(w, dup.Result)
		return
	}
	g.run(w, r, tk)
}

// identify reads the request's key (from its header values raw) and body,
// and returns the gate's key and the request's fingerprint; on a request
// it refuses, it writes the problem and reports false.
func (g *guard) identify(w http.ResponseWriter, r *http.Request, raw []string) (content string, fp []byte, ok bool) {
	if len(raw) != 1 { // two keys: a retry sending one of them would not match
		problem(w, http.StatusBadRequest, "this request has "+strconv.Itoa(len(raw))+" "+Header+" headers; send one")
		return "", nil, false
	}
	key, ok := parseKey(raw[0], g.s.bareKeys)
	if !ok {
		problem(w, http.StatusBadRequest, Header+` must be one structured-field string, such as "8e03978e-40d5-43e8-bc93-6894a57f9324"`)
		return "", nil, false
	}
	if key == "" || len(key) > g.s.maxKeyLen {
		problem(w, http.StatusBadRequest, fmt.Sprintf("%s must be 1 to %d characters", Header, g.s.maxKeyLen))
		return "", nil, false
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, g.s.maxBody+1))
	if err != nil {
		problem(w, http.StatusBadRequest, "reading the request body: "+err.Error())
		return "", nil, false
	}
	if int64(len(body)) > g.s.maxBody {
		problem(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request bodies are limited to %d bytes", g.s.maxBody))
		return "", nil, false
	}
	r.Body = io.NopCloser(bytes.NewReader(body))

	// The fingerprint tells a retry from a reuse of the key for another
	// request.
	printed, err := g.s.print(r, body)
	if err != nil {
		problem(w, http.StatusBadRequest, "this request cannot be fingerprinted: "+err.Error())
		return "", nil, false
	}
	sum := sha256.Sum256(printed)
	scope := ""
	if g.s.scope != nil {
		scope = g.s.scope(r)
	}
	return keyContent(scope, key), sum[:], true
}

func keyContent(scope, key string) string {
	return "idemhttp\x00" + strconv.Quote(scope) + "\x00" + key
}

// KeyID returns the ID of the operation the middleware runs for key (the
// parsed key, without quotes) within scope ("" without WithScope), for
// operators: Gate.Lookup and Gate.Forget take it.
func KeyID(gate *idem.Gate, scope, key string) (idem.ID, error) {
	if gate == nil {
		return idem.ID{}, fmt.Errorf("%w: idemhttp.KeyID: gate is nil", locker.ErrInvalidArgument)
	}
	return gate.Identify(keyContent(scope, key))
}

// stored is a response as the record keeps it.
type stored struct {
	Status int         `json:"s"`
	Header http.Header `json:"h,omitempty"`
	Body   []byte      `json:"b,omitempty"`
}

func replay(w http.ResponseWriter, result []byte) {
	var resp stored
	if len(result) == 0 || json.Unmarshal(result, &resp) != nil || resp.Status == 0 {
		problem(w, http.StatusConflict, "a request with this "+Header+" was processed, but its response was too large to keep")
		return
	}
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.Header().Set(ReplayedHeader, "true")
	w.WriteHeader(resp.Status)
	_, _ = w.Write(resp.Body)
}

// errStatus is the failure Done records for a failed response.
type errStatus int

func (e errStatus) Error() string { return "response status " + strconv.Itoa(int(e)) }

func (g *guard) run(w http.ResponseWriter, r *http.Request, tk *idem.Ticket) {
	rec := &recorder{w: w, limit: g.gate.MaxResult()}
	ctx := context.WithoutCancel(r.Context()) // report even if the client left
	finished := false
	defer func() {
		if !finished { // the handler panicked: let a retry run
			g.report(tk, tk.Done(ctx, errors.New("handler panicked")))
		}
	}()
	g.next.ServeHTTP(rec, r)
	finished = true
	status := rec.status
	if status == 0 {
		status = http.StatusOK
	}
	if g.s.failed(status) || g.s.notStored(status) {
		g.report(tk, tk.Done(ctx, errStatus(status)))
		return
	}
	var result []byte
	if !rec.overflow {
		result, _ = json.Marshal(stored{Status: status, Header: rec.header, Body: rec.body.Bytes()})
	}
	err := tk.Succeed(ctx, result)
	if errors.Is(err, locker.ErrInvalidArgument) { // over the gate's WithMaxResult: keep the outcome only
		err = tk.Succeed(ctx, nil)
	}
	g.report(tk, err)
}

func (g *guard) report(tk *idem.Ticket, err error) {
	if errors.Is(err, idem.ErrPending) {
		g.s.log.Info("idemhttp: outcome pending; the gate records it when the store answers", "id", tk.ID().String(), "store", tk.Store())
		return
	}
	if err != nil {
		g.s.log.Warn("idemhttp: outcome not recorded", "id", tk.ID().String(), "err", err)
	}
}

// recorder passes a response through and keeps a copy of it, up to limit
// bytes of body.
type recorder struct {
	w        http.ResponseWriter
	status   int
	header   http.Header
	body     bytes.Buffer
	limit    int
	overflow bool
}

func (rec *recorder) Header() http.Header { return rec.w.Header() }

func (rec *recorder) WriteHeader(status int) {
	if rec.status == 0 {
		rec.status = status
		rec.header = rec.w.Header().Clone()
		rec.header.Del("Date")
	}
	rec.w.WriteHeader(status)
}

func (rec *recorder) Write(b []byte) (int, error) {
	if rec.status == 0 {
		rec.WriteHeader(http.StatusOK)
	}
	if !rec.overflow {
		if rec.body.Len()+len(b) > rec.limit {
			rec.overflow = true
			rec.body = bytes.Buffer{}
		} else {
			rec.body.Write(b)
		}
	}
	return rec.w.Write(b)
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (rec *recorder) Unwrap() http.ResponseWriter { return rec.w }
