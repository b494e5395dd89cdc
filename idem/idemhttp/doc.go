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
//     runs again.
//
// Error responses are RFC 9457 problem documents. The key is the request's
// operation ID within its scope (WithScope, e.g. the authenticated client);
// the fingerprint is SHA-256 of the method, the request URI and the body,
// which the middleware reads (at most WithMaxBody bytes, else 413) and
// hands on to the handler. When the gate's store is unavailable, a
// fail-closed gate gives 503 with Retry-After, a fail-open gate lets the
// request run unguarded. A response whose record would exceed the gate's
// WithMaxResult is recorded without its content: a later duplicate gets
// 409 saying that it was processed. If the outcome cannot be recorded
// (the store failed after the response was sent) the middleware logs it,
// and duplicates get 409 until the gate's expiry.
//
// The middleware holds nothing between requests and starts no goroutine.
package idemhttp
