package config

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
)

var durationType = reflect.TypeFor[time.Duration]()

// decode fills c from the settings viper parsed, strictly: no key that the
// schema does not have, no value of the wrong type. Every problem names its
// key; mistyped lists the fields left zero for a value of the wrong type.
func decode(settings map[string]any, c *Config) (problems []*FieldError, mistyped []string) {
	var md mapstructure.Metadata
	d, err := mapstructure.NewDecoder(&mapstructure.DecoderConfig{
		Result:           c,
		TagName:          "mapstructure",
		Metadata:         &md,
		WeaklyTypedInput: false,
		DecodeHook:       strictHook,
	})
	if err != nil {
		return []*FieldError{{Msg: err.Error()}}, nil
	}
	err = d.Decode(settings)
	for _, key := range md.Unused {
		problems = append(problems, unknownKey(key))
	}
	for _, p := range decodeProblems(err) {
		problems = append(problems, p)
		mistyped = append(mistyped, p.Field)
	}
	sort.SliceStable(problems, func(i, j int) bool { return problems[i].Field < problems[j].Field })
	return problems, mistyped
}

// besides drops the problems about the fields in mistyped and under them:
// a value of the wrong type is left zero, and is already reported.
func besides(problems []*FieldError, mistyped []string) []*FieldError {
	return slices.DeleteFunc(problems, func(p *FieldError) bool {
		return slices.ContainsFunc(mistyped, func(m string) bool {
			rest, under := strings.CutPrefix(p.Field, m)
			return under && (rest == "" || rest[0] == '.' || rest[0] == '[')
		})
	})
}

// unknownKey reports a key the schema does not have, with the closest key
// it does have when there is one.
func unknownKey(key string) *FieldError {
	parent, name := "", key
	if i := strings.LastIndexByte(key, '.'); i >= 0 {
		parent, name = key[:i], key[i+1:]
	}
	msg := fmt.Sprintf("unknown key %q", name)
	if s := suggest(name, keysAt(parent)); s != "" {
		msg += fmt.Sprintf(" (did you mean %q?)", s)
	}
	return &FieldError{Field: parent, Msg: msg}
}

// keysAt returns the keys the schema allows under parent ("", "lock",
// "engines[0]", "engines[0].tls", ...).
func keysAt(parent string) []string {
	t := reflect.TypeFor[Config]()
	if parent != "" {
		for _, part := range strings.Split(parent, ".") {
			if i := strings.IndexByte(part, '['); i >= 0 {
				part = part[:i]
			}
			f, ok := fieldByTag(t, part)
			if !ok {
				return nil
			}
			t = f.Type
			if t.Kind() == reflect.Slice {
				t = t.Elem()
			}
			if t.Kind() != reflect.Struct {
				return nil
			}
		}
	}
	var keys []string
	for i := range t.NumField() {
		if tag := t.Field(i).Tag.Get("mapstructure"); tag != "" {
			keys = append(keys, tag)
		}
	}
	return keys
}

func fieldByTag(t reflect.Type, tag string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		if t.Field(i).Tag.Get("mapstructure") == tag {
			return t.Field(i), true
		}
	}
	return reflect.StructField{}, false
}

// suggest returns the candidate within two edits of s, if any.
func suggest(s string, candidates []string) string {
	best, bestD := "", 3
	for _, c := range candidates {
		if d := editDistance(s, c); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// hookError is a type problem found by strictHook; its message is final.
type hookError struct{ msg string }

func (e *hookError) Error() string { return e.msg }

// strictHook turns duration strings into time.Duration and refuses bare
// numbers for durations (but 0) and fractions for integers, which
// mapstructure would otherwise take as nanoseconds or truncate.
func strictHook(from, to reflect.Value) (any, error) {
	if !from.IsValid() {
		return from, nil
	}
	in := from.Interface()
	if to.Type() == durationType {
		switch v := in.(type) {
		case string:
			d, err := time.ParseDuration(strings.TrimSpace(v))
			if err != nil {
				return nil, &hookError{fmt.Sprintf("want a duration such as \"30s\" or \"1m30s\", got %q", v)}
			}
			return d, nil
		case time.Duration:
			return v, nil
		}
		if isNumber(from) && from.IsZero() {
			return time.Duration(0), nil
		}
		if isNumber(from) {
			return nil, &hookError{fmt.Sprintf("want a duration with a unit such as \"30s\", got the number %v", in)}
		}
		return nil, &hookError{"want a duration such as \"30s\", got " + describe(from)}
	}
	switch to.Kind() {
	case reflect.Slice:
		if k := from.Kind(); k != reflect.Slice && k != reflect.Array {
			return nil, &hookError{"want " + want(to.Type()) + ", got " + describe(from)}
		}
	case reflect.Struct:
		if k := from.Kind(); k != reflect.Map && k != reflect.Struct {
			return nil, &hookError{"want " + want(to.Type()) + ", got " + describe(from)}
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if from.Kind() == reflect.Float32 || from.Kind() == reflect.Float64 {
			f := from.Float()
			if f != math.Trunc(f) || f > math.MaxInt32 || f < math.MinInt32 {
				return nil, &hookError{fmt.Sprintf("want an integer, got %v", f)}
			}
			return int(f), nil
		}
	}
	return in, nil
}

func isNumber(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		return true
	}
	return false
}

// describe names the kind of a parsed value, without its content: values
// may be secrets.
func describe(v reflect.Value) string {
	switch {
	case !v.IsValid():
		return "nothing"
	case v.Kind() == reflect.String:
		return "a string"
	case v.Kind() == reflect.Bool:
		return "a boolean"
	case isNumber(v):
		return "a number"
	case v.Kind() == reflect.Slice || v.Kind() == reflect.Array:
		return "a list"
	case v.Kind() == reflect.Map || v.Kind() == reflect.Struct:
		return "a table of keys"
	}
	return v.Type().String()
}

// want names what a field of type t takes.
func want(t reflect.Type) string {
	switch {
	case t == durationType:
		return "a duration such as \"30s\""
	case t.Kind() == reflect.String:
		return "a string (quote it)"
	case t.Kind() == reflect.Bool:
		return "true or false"
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Int64:
		return "an integer"
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.String:
		return "a list of strings"
	case t.Kind() == reflect.Slice:
		return "a list"
	case t.Kind() == reflect.Struct:
		return "a table of keys"
	}
	return t.String()
}

// decodeProblems flattens mapstructure's errors into one FieldError per
// field.
func decodeProblems(err error) []*FieldError {
	if err == nil {
		return nil
	}
	var out []*FieldError
	var walk func(error)
	walk = func(err error) {
		var de *mapstructure.DecodeError
		switch e := err.(type) {
		case interface{ Unwrap() []error }:
			for _, inner := range e.Unwrap() {
				walk(inner)
			}
			return
		case *mapstructure.DecodeError:
			inner := e.Unwrap()
			if errors.As(inner, &de) {
				walk(inner)
				return
			}
			out = append(out, &FieldError{Field: e.Name(), Msg: typeMessage(inner)})
			return
		}
		if inner := errors.Unwrap(err); inner != nil {
			walk(inner)
			return
		}
		out = append(out, &FieldError{Msg: err.Error()})
	}
	walk(err)
	return out
}

func typeMessage(err error) string {
	var he *hookError
	var ue *mapstructure.UnconvertibleTypeError
	var pe *mapstructure.ParseError
	switch {
	case errors.As(err, &he):
		return he.msg
	case errors.As(err, &ue):
		return "want " + want(ue.Expected.Type()) + ", got " + describe(reflect.ValueOf(ue.Value))
	case errors.As(err, &pe):
		return "want " + want(pe.Expected.Type()) + ", got " + describe(reflect.ValueOf(pe.Value))
	}
	return err.Error()
}
