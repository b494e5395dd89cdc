package config

import (
	"cmp"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/orthrus-go/orthrus/engines/etcd"
	"github.com/orthrus-go/orthrus/engines/postgres"
	"github.com/orthrus-go/orthrus/engines/redis"
	"github.com/orthrus-go/orthrus/engines/redlock"
	"github.com/orthrus-go/orthrus/engines/zk"
	"github.com/orthrus-go/orthrus/internal/zkconn"
)

var engineTypes = []string{TypeRedis, TypeZK, TypeEtcd, TypePostgres, TypeRedlock}

// minTTLOf is the shortest TTL each engine type honours: its MinTTL.
var minTTLOf = map[string]time.Duration{TypeRedis: redis.MinTTL, TypeZK: zk.MinTTL, TypeEtcd: etcd.MinTTL, TypePostgres: postgres.MinTTL}

// minTTL is the shortest TTL engine e honours: its type's, or for redlock
// the one its node timeout gives.
func (e *Engine) minTTL() time.Duration {
	if e.Type == TypeRedlock {
		return redlock.MinTTLFor(orDefault(e.NodeTimeout, redlock.DefaultNodeTimeout))
	}
	return minTTLOf[e.Type]
}

// Validate checks c as Load does, without the environment: it returns nil
// or a *ValidationError naming every bad field. It reads the TLS files it
// names. A zero setting means its default and is valid.
func (c *Config) Validate() error {
	if problems := c.validate(); len(problems) > 0 {
		return &ValidationError{File: c.file, Fields: problems}
	}
	return nil
}

// problems collects FieldErrors.
type problems []*FieldError

func (p *problems) add(field, format string, args ...any) {
	*p = append(*p, &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)})
}

func (p *problems) positive(field string, d time.Duration) {
	if d < 0 {
		p.add(field, "must be positive, got %v", d)
	}
}

func (c *Config) validate() []*FieldError {
	var p problems
	if len(c.Engines) == 0 {
		p.add("engines", "empty (want at least one engine)")
	}
	seen := make(map[string]int)
	var names []string
	for i := range c.Engines {
		e := &c.Engines[i]
		field := fmt.Sprintf("engines[%d]", i)
		switch {
		case e.Name == "":
			p.add(field+".name", "empty")
		default:
			if j, dup := seen[e.Name]; dup {
				p.add(field+".name", "duplicate %q (also engines[%d])", e.Name, j)
			} else {
				seen[e.Name] = i
				names = append(names, e.Name)
			}
		}
		e.validate(field, &p)
	}
	if c.Active != "" && len(names) > 0 {
		if _, ok := seen[c.Active]; !ok {
			p.add("active", "unknown engine %q (want one of %s)", c.Active, quoteAll(names))
		}
	}
	p.positive("start_timeout", c.StartTimeout)
	p.positive("lock.ttl", c.Lock.TTL)
	c.checkMinTTL(&p)
	if c.Lock.Weight < 0 || c.Lock.Weight > 10 {
		p.add("lock.weight", "must be 1 to 10, got %d", c.Lock.Weight)
	}
	if c.Breaker.Failures < 0 {
		p.add("breaker.failures", "must be positive, got %d", c.Breaker.Failures)
	}
	p.positive("breaker.open_timeout", c.Breaker.OpenTimeout)
	p.positive("breaker.outage_wait", c.Breaker.OutageWait)
	p.positive("health.every", c.Health.Every)
	p.positive("health.timeout", c.Health.Timeout)
	p.positive("failback.after", c.Failback.After)
	p.positive("safe_switch.max_ttl", c.SafeSwitch.MaxTTL)
	if ttl := orDefault(c.Lock.TTL, defaultTTL); c.SafeSwitch.MaxTTL > 0 && c.Lock.TTL >= 0 && c.SafeSwitch.MaxTTL < ttl {
		p.add("safe_switch.max_ttl", "%v is shorter than lock.ttl %v: it must cover the longest TTL in use", c.SafeSwitch.MaxTTL, ttl)
	}
	c.Source.validate(&p)
	sort.SliceStable(p, func(i, j int) bool { return p[i].Field < p[j].Field })
	return p
}

// checkMinTTL refuses a lock.ttl below the minimum TTL of an engine: a
// hold may go to any of them, so the largest minimum is the switcher's.
func (c *Config) checkMinTTL(p *problems) {
	if c.Lock.TTL <= 0 || len(c.Engines) == 0 {
		return // the default, or reported already
	}
	e := slices.MaxFunc(c.Engines, func(a, b Engine) int { return cmp.Compare(a.minTTL(), b.minTTL()) })
	if min := e.minTTL(); c.Lock.TTL < min {
		p.add("lock.ttl", "%v is below %v, the minimum TTL of engine %q (%s), the largest of the engines'", c.Lock.TTL, min, e.Name, e.Type)
	}
}

// orDefault returns d, or def when d is zero.
func orDefault(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

func quoteAll(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	return strings.Join(q, ", ")
}

// settingsOf tells which engine settings belong to which types; the others
// are shared by all.
var settingsOf = map[string][]string{
	"addrs":             {TypeRedis, TypeRedlock},
	"db":                {TypeRedis},
	"master_name":       {TypeRedis},
	"sentinel_username": {TypeRedis},
	"sentinel_password": {TypeRedis},
	"fair":              {TypeRedis},
	"servers":           {TypeZK},
	"session_timeout":   {TypeZK},
	"auth":              {TypeZK},
	"endpoints":         {TypeEtcd},
	"dsn":               {TypePostgres},
	"node_timeout":      {TypeRedlock},
	"username":          {TypeRedis, TypeEtcd, TypePostgres, TypeRedlock},
	"password":          {TypeRedis, TypeEtcd, TypePostgres, TypeRedlock},
	"tls":               {TypeRedis, TypeEtcd, TypeZK, TypePostgres, TypeRedlock},

	"dsn_file":               {TypePostgres},
	"password_file":          {TypeRedis, TypeEtcd, TypePostgres, TypeRedlock},
	"sentinel_password_file": {TypeRedis},
}

// foreign reports the settings of v (a struct) that are set but do not
// belong to typ according to owners.
func foreign(v reflect.Value, typ, field string, owners map[string][]string, p *problems) {
	t := v.Type()
	for i := range t.NumField() {
		key := t.Field(i).Tag.Get("mapstructure")
		types, ok := owners[key]
		if !ok || v.Field(i).IsZero() || contains(types, typ) {
			continue
		}
		p.add(field+"."+key, "not a %s setting (only %s)", typ, strings.Join(types, ", "))
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func (e *Engine) validate(field string, p *problems) {
	switch e.Type {
	case TypeRedis, TypeZK, TypeEtcd, TypePostgres, TypeRedlock:
	case "":
		p.add(field+".type", "empty (want %s)", strings.Join(engineTypes, ", "))
		return
	default:
		p.add(field+".type", "unknown engine %q (want %s)", e.Type, strings.Join(engineTypes, ", "))
		return
	}
	foreign(reflect.ValueOf(e).Elem(), e.Type, field, settingsOf, p)
	p.positive(field+".dial_timeout", e.DialTimeout)
	switch e.Type {
	case TypeRedis:
		addresses(field+".addrs", e.Addrs, p)
		if e.DB < 0 {
			p.add(field+".db", "must be 0 or more, got %d", e.DB)
		}
		if e.DB != 0 && len(e.Addrs) > 1 && e.MasterName == "" {
			p.add(field+".db", "must be 0 with a Cluster (several addrs), got %d", e.DB)
		}
		if strings.ContainsAny(e.Prefix, "{}") {
			p.add(field+".prefix", "%q contains '{' or '}', which would break the Cluster hash tag", e.Prefix)
		}
		if e.MasterName == "" && (e.SentinelUsername != "" || e.SentinelPassword != "") {
			p.add(field+".master_name", "empty while sentinel credentials are set")
		}
		e.TLS.validate(field+".tls", p)
	case TypeZK:
		addresses(field+".servers", e.Servers, p)
		p.positive(field+".session_timeout", e.SessionTimeout)
		e.Auth.validate(field+".auth", EnvName(e.Name, "auth.credentials"), p)
		e.TLS.validate(field+".tls", p)
		if e.Prefix != "" {
			if err := zkconn.CheckPath(ensureSlash(e.Prefix)); err != nil {
				p.add(field+".prefix", "%q: %v", e.Prefix, err)
			}
		}
	case TypeEtcd:
		addresses(field+".endpoints", e.Endpoints, p)
		if strings.HasSuffix(e.Prefix, "/") {
			p.add(field+".prefix", "%q ends with '/' (keys are <prefix>/<name>/...)", e.Prefix)
		}
		if (e.Password != "" || e.PasswordFile != "") && e.Username == "" {
			p.add(field+".username", "empty while password is set")
		}
		e.TLS.validate(field+".tls", p)
	case TypePostgres:
		if e.DSN == "" && e.DSNFile == "" {
			p.add(field+".dsn", "empty (or set dsn_file)")
		}
		if e.Prefix != "" {
			if err := postgres.CheckSchema(e.Prefix); err != nil {
				p.add(field+".prefix", "%v", err)
			}
		}
		e.TLS.validate(field+".tls", p)
	case TypeRedlock:
		e.validateRedlock(field, p)
	}
}

func ensureSlash(p string) string {
	if !strings.HasPrefix(p, "/") {
		return "/" + p
	}
	return p
}

func addresses(field string, addrs []string, p *problems) {
	if len(addrs) == 0 {
		p.add(field, "empty")
		return
	}
	for i, a := range addrs {
		if strings.TrimSpace(a) == "" {
			p.add(fmt.Sprintf("%s[%d]", field, i), "empty address")
		}
	}
}

// validate checks a ZooKeeper credential; env is the variable that sets
// its credentials, named when they are missing: they belong there.
func (a *Auth) validate(field, env string, p *problems) {
	switch {
	case a.Scheme == "" && a.Credentials == "" && a.CredentialsFile == "":
	case a.Scheme == "":
		p.add(field+".scheme", "empty while auth.credentials is set")
	case a.Credentials == "" && a.CredentialsFile != "": // read by Load or Open
	case a.Credentials == "":
		p.add(field+".credentials", "empty while auth.scheme is set (set %s)", env)
	default:
		if _, err := zkconn.NewCredential(a.Scheme, a.Credentials); err != nil {
			p.add(field+".credentials", "%v", err)
		}
	}
}

func (t *TLS) validate(field string, p *problems) {
	if !t.Enabled {
		if *t != (TLS{}) {
			p.add(field+".enabled", "false while other tls settings are set")
		}
		return
	}
	if _, err := t.config(field); err != nil {
		var fe *FieldError
		if errors.As(err, &fe) {
			*p = append(*p, fe)
		}
	}
}

// config builds the tls.Config; nil when TLS is off. Errors are
// FieldErrors.
func (t *TLS) config(field string) (*tls.Config, error) {
	if !t.Enabled {
		return nil, nil
	}
	c := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		ServerName:         t.ServerName,
		InsecureSkipVerify: t.InsecureSkipVerify,
	}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, &FieldError{Field: field + ".ca_file", Msg: err.Error()}
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(pem) {
			return nil, &FieldError{Field: field + ".ca_file", Msg: fmt.Sprintf("no PEM certificate in %s", t.CAFile)}
		}
	}
	switch {
	case t.CertFile != "" && t.KeyFile != "":
		cert, err := keyPair(field, t.CertFile, t.KeyFile)
		if err != nil {
			return nil, err
		}
		c.Certificates = []tls.Certificate{cert}
	case t.CertFile != "":
		return nil, &FieldError{Field: field + ".key_file", Msg: "empty while cert_file is set"}
	case t.KeyFile != "":
		return nil, &FieldError{Field: field + ".cert_file", Msg: "empty while key_file is set"}
	}
	return c, nil
}

// sourceSettingsOf tells which source settings belong to which types.
var sourceSettingsOf = map[string][]string{
	"endpoints":       {SourceEtcd},
	"key":             {SourceEtcd},
	"username":        {SourceEtcd},
	"password":        {SourceEtcd},
	"tls":             {SourceEtcd},
	"servers":         {SourceZK},
	"path":            {SourceZK},
	"session_timeout": {SourceZK},
	"auth":            {SourceZK},
	"dial_timeout":    {SourceEtcd},
	"password_file":   {SourceEtcd},
}

func (s *Source) validate(p *problems) {
	typ := s.Type
	switch typ {
	case "", SourceNone, SourceFile, SourceEtcd, SourceZK:
	default:
		p.add("source.type", "unknown source %q (want %s, %s, %s or %s)", typ, SourceFile, SourceEtcd, SourceZK, SourceNone)
		return
	}
	if typ == "" {
		typ = SourceNone
	}
	foreign(reflect.ValueOf(s).Elem(), typ, "source", sourceSettingsOf, p)
	p.positive("source.dial_timeout", s.DialTimeout)
	switch typ {
	case SourceEtcd:
		addresses("source.endpoints", s.Endpoints, p)
		if s.Key == "" {
			p.add("source.key", "empty")
		}
		if s.Password != "" && s.Username == "" {
			p.add("source.username", "empty while password is set")
		}
		s.TLS.validate("source.tls", p)
	case SourceZK:
		addresses("source.servers", s.Servers, p)
		if err := zkconn.CheckPath(s.Path); err != nil {
			p.add("source.path", "%q: %v", s.Path, err)
		}
		p.positive("source.session_timeout", s.SessionTimeout)
		s.Auth.validate("source.auth", EnvName("", "source.auth.credentials"), p)
	}
}
