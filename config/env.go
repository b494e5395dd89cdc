package config

import (
	"fmt"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"
)

// envPrefix starts the name of every environment override.
const envPrefix = "ORTHRUS_"

// environ returns the environment overrides that are set and not empty.
func environ() map[string]string {
	env := make(map[string]string)
	for _, kv := range os.Environ() {
		k, v, ok := strings.Cut(kv, "=")
		if ok && v != "" && strings.HasPrefix(k, envPrefix) {
			env[k] = v
		}
	}
	return env
}

// EnvName returns the environment variable that overrides a setting of the
// engine named engine ("" for a setting outside engines), given as its key
// path: EnvName("", "lock.ttl") is ORTHRUS_LOCK_TTL, and
// EnvName("redis-main", "password") is ORTHRUS_ENGINES_REDIS_MAIN_PASSWORD.
// Letters are upper-cased and every other character but digits becomes
// '_'.
func EnvName(engine, key string) string {
	if engine != "" {
		return envPrefix + "ENGINES_" + envWord(engine) + "_" + envWord(key)
	}
	return envPrefix + envWord(key)
}

func envWord(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z':
			return r - 'a' + 'A'
		case r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
			return r
		}
		return '_'
	}, s)
}

// envTarget is one setting that an environment variable can override.
type envTarget struct {
	field string // path in the file, for messages
	value reflect.Value
}

// applyEnv overrides settings from env: every setting has a variable (see
// EnvName), but engine names and types. Two engines whose variables would
// clash are reported on the second one's name.
func (c *Config) applyEnv(env map[string]string) []*FieldError {
	targets := make(map[string]envTarget)
	root := reflect.ValueOf(c).Elem()
	collect(root, "", func(key, field string, v reflect.Value) {
		targets[EnvName("", key)] = envTarget{field, v}
	})
	var problems []*FieldError
	owner := make(map[string]int) // variable -> engine index
	seen := make(map[string]bool) // engine names
	for i := range c.Engines {
		e := &c.Engines[i]
		if e.Name == "" || seen[e.Name] {
			continue // reported by validate
		}
		seen[e.Name] = true
		mine := make(map[string]envTarget)
		clash := -1
		collect(reflect.ValueOf(e).Elem(), "", func(key, _ string, v reflect.Value) {
			if key == "name" || key == "type" {
				return
			}
			name := EnvName(e.Name, key)
			if j, dup := owner[name]; dup && clash < 0 {
				clash = j
			}
			mine[name] = envTarget{fmt.Sprintf("engines[%d].%s", i, key), v}
		})
		if clash >= 0 {
			problems = append(problems, &FieldError{Field: fmt.Sprintf("engines[%d].name", i),
				Msg: fmt.Sprintf("%q: its environment variables (%s) clash with those of engines[%d] %q; rename one",
					e.Name, EnvName(e.Name, "")+"*", clash, c.Engines[clash].Name)})
			continue
		}
		for name, t := range mine {
			owner[name] = i
			targets[name] = t
		}
	}
	for name, val := range env {
		t, ok := targets[name]
		if !ok {
			problems = append(problems, unknownEnv(name, targets, c.Engines))
			continue
		}
		if err := setFromEnv(t.value, val); err != nil {
			problems = append(problems, &FieldError{Field: t.field, Msg: fmt.Sprintf("%s: %v", name, err)})
		}
	}
	sort.SliceStable(problems, func(i, j int) bool {
		a, b := problems[i], problems[j]
		return a.Field < b.Field || a.Field == b.Field && a.Msg < b.Msg
	})
	return problems
}

// unknownEnv reports an ORTHRUS_ variable that overrides nothing: a typo
// there would otherwise go unseen, and secrets are set there.
func unknownEnv(name string, targets map[string]envTarget, engines []Engine) *FieldError {
	for _, e := range engines {
		if name == EnvName(e.Name, "name") || name == EnvName(e.Name, "type") {
			return &FieldError{Msg: fmt.Sprintf("environment variable %s: an engine's name and type cannot be overridden", name)}
		}
	}
	best, bestD := "", -1
	for candidate := range targets {
		d := editDistance(name, candidate)
		if bestD < 0 || d < bestD || d == bestD && candidate < best {
			best, bestD = candidate, d
		}
	}
	msg := fmt.Sprintf("environment variable %s matches no setting", name)
	if best != "" {
		msg += fmt.Sprintf(" (the closest is %s, for %s)", best, targets[best].field)
	}
	return &FieldError{Msg: msg}
}

// collect calls fn for every settable leaf under v (a struct), with its
// key path ("lock.ttl") and its path for messages. Lists of tables
// (engines) are left out.
func collect(v reflect.Value, prefix string, fn func(key, field string, v reflect.Value)) {
	t := v.Type()
	for i := range t.NumField() {
		tag := t.Field(i).Tag.Get("mapstructure")
		if tag == "" {
			continue
		}
		key := tag
		if prefix != "" {
			key = prefix + "." + tag
		}
		f := v.Field(i)
		switch {
		case f.Kind() == reflect.Struct:
			collect(f, key, fn)
		case f.Kind() == reflect.Slice && f.Type().Elem().Kind() != reflect.String:
			// engines: overridden per engine
		default:
			fn(key, key, f)
		}
	}
}

// setFromEnv parses s into v: lists are comma-separated.
func setFromEnv(v reflect.Value, s string) error {
	switch {
	case v.Type() == durationType:
		d, err := time.ParseDuration(strings.TrimSpace(s))
		if err != nil {
			return fmt.Errorf("want a duration such as \"30s\", got %q", s)
		}
		v.SetInt(int64(d))
	case v.Kind() == reflect.String:
		v.SetString(s)
	case v.Kind() == reflect.Bool:
		b, err := strconv.ParseBool(strings.TrimSpace(s))
		if err != nil {
			return fmt.Errorf("want true or false, got %q", s)
		}
		v.SetBool(b)
	case v.Kind() == reflect.Int:
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			return fmt.Errorf("want an integer, got %q", s)
		}
		v.SetInt(int64(n))
	case v.Kind() == reflect.Slice && v.Type().Elem().Kind() == reflect.String:
		var list []string
		for _, item := range strings.Split(s, ",") {
			if item = strings.TrimSpace(item); item != "" {
				list = append(list, item)
			}
		}
		v.Set(reflect.ValueOf(list))
	default:
		return fmt.Errorf("cannot be set from the environment (%s)", v.Type())
	}
	return nil
}
