// Package idemhttp is net/http middleware that makes requests carrying an
// Idempotency-Key header (draft-ietf-httpapi-idempotency-key-header) run
// once across a fleet, through an idem.Gate.
//
//	mw, err := idemhttp.Middleware(gate)
//	http.Handle("/payments", mw(paymentsHandler))
//
// For a guarded request (POST and PATCH by default) with the header:
//
//   - the first request runs; its response is recorded as it is sent;
//   - a duplicate while it runs gets 409 Conflict;
//   - a later duplicate gets the recorded response replayed (status,
//     headers, body), with the header Idempotent-Replayed: true;
//   - the same key with a different request (method, URI or body) gets 422
//     Unprocessable Content;
//   - a response that counts as a failure (5xx by default, WithFailure), or
//     a handler that panics, deletes the record, so that the client's retry
//     runs again;
//   - a response the handler gives before any side effect (by default the
//     4xx of DefaultNotStored; WithNotStored) is sent but not recorded, so
//     that the fixed request runs with the same key.
//
// The key is one RFC 8941 sf-string ("abc" is the key abc): a bare token
// (unless WithBareKeys), a list, text after the string, or two
// Idempotency-Key headers get 400. Error responses are RFC 9457 problem
// documents. The key is the request's operation ID within its scope
// (WithScope, e.g. the authenticated client; KeyID gives it to
// operators); the fingerprint is SHA-256 of the method, the request URI
// and the body, or of what WithFingerprint picks (JSONFields: chosen
// fields of a JSON body). The middleware reads the body (at most
// WithMaxBody bytes, else 413) and hands it on to the handler. WithOnReplay
// is called before each replay. When the gate's store is unavailable, a
// fail-closed gate gives 503 with Retry-After, a fail-open gate lets the
// request run unguarded. A response whose record would exceed the gate's
// WithMaxResult is recorded without its content: a later duplicate gets
// 409 saying that it was processed. If the store does not answer when the
// response is done, the gate keeps the outcome and writes it when the
// store is back (idem.WithPending): duplicates reaching this process get
// the replay meanwhile, others 409, and never past the gate's expiry.
//
// The middleware holds nothing between requests and starts no goroutine.
package idemhttp
