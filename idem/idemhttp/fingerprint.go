package idemhttp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// JSONFields returns a fingerprint (WithFingerprint) over the method, the
// path and the named fields of a JSON object body: a dotted name reaches
// into nested objects ("payment.amount"). Other fields, and the query, do
// not count, so a retry that changes a volatile field (a timestamp, a
// client's request ID) is still a retry. A field that is absent counts as
// absent (it differs from null). A body that is not a JSON object answers
// 400.
func JSONFields(fields ...string) func(r *http.Request, body []byte) ([]byte, error) {
	paths := make([][]string, len(fields))
	for i, f := range fields {
		paths[i] = strings.Split(f, ".")
	}
	return func(r *http.Request, body []byte) ([]byte, error) {
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.UseNumber() // numbers keep their text
		var doc map[string]any
		if err := dec.Decode(&doc); err != nil || doc == nil {
			return nil, errors.New("the body is not a JSON object")
		}
		picked := make(map[string]any, len(paths))
		for i, p := range paths {
			if v, ok := dig(doc, p); ok {
				picked[fields[i]] = v
			}
		}
		sub, err := json.Marshal(picked) // map keys sorted: the same fields give the same bytes
		if err != nil {
			return nil, fmt.Errorf("fingerprint: %w", err)
		}
		out := make([]byte, 0, len(r.Method)+len(r.URL.Path)+2+len(sub))
		out = append(append(append(append(out, r.Method...), 0), r.URL.Path...), 0)
		return append(out, sub...), nil
	}
}

func dig(v any, path []string) (any, bool) {
	for _, k := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		if v, ok = m[k]; !ok {
			return nil, false
		}
	}
	return v, true
}
