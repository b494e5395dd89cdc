package cfgops

import (
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/orthrus-go/orthrus/config"
)

// Security summarises how the engine connects and authenticates, for
// operators (lockctl status), without any secret: "tls mutual, user app1,
// password from file".
func Security(e *config.Engine) string {
	var parts []string
	dsn := postgresDSN(e)
	switch {
	case !e.TLS.Enabled && dsn != nil:
		parts = append(parts, dsn.tls)
	case !e.TLS.Enabled:
		parts = append(parts, "no tls")
	case e.TLS.InsecureSkipVerify:
		parts = append(parts, "tls unverified")
	case e.TLS.CertFile != "":
		parts = append(parts, "tls mutual")
	default:
		parts = append(parts, "tls")
	}
	switch {
	case e.Username != "":
		parts = append(parts, "user "+e.Username)
	case dsn != nil && dsn.user != "":
		parts = append(parts, "user "+dsn.user)
	}
	switch {
	case e.DSNFile != "":
		parts = append(parts, "dsn from file")
	case e.PasswordFile != "":
		parts = append(parts, "password from file")
	case e.Password != "":
		parts = append(parts, "password")
	case dsn != nil && dsn.password:
		parts = append(parts, "password in dsn")
	}
	if e.Auth.Scheme != "" {
		user, _, _ := strings.Cut(e.Auth.Credentials, ":")
		if e.Auth.Scheme == "digest" && user != "" {
			parts = append(parts, "digest user "+user)
		} else {
			parts = append(parts, e.Auth.Scheme+" auth")
		}
	}
	return strings.Join(parts, ", ")
}

// dsnView is what operators may see of a postgres engine's DSN.
type dsnView struct {
	hosts     []string // host:port, the fallback hosts too
	user, tls string
	password  bool
}

// postgresDSN reads the DSN of a postgres engine, nil for another type or
// a DSN that does not parse (Open reports that).
func postgresDSN(e *config.Engine) *dsnView {
	if e.Type != config.TypePostgres {
		return nil
	}
	c, err := pgconn.ParseConfig(e.DSN)
	if err != nil {
		return nil
	}
	v := &dsnView{user: c.User, tls: "no tls", password: c.Password != ""}
	switch {
	case c.TLSConfig == nil:
	case len(c.Fallbacks) > 0 && c.Fallbacks[len(c.Fallbacks)-1].TLSConfig == nil:
		v.tls = "tls if offered (sslmode prefer)"
	case c.TLSConfig.InsecureSkipVerify:
		v.tls = "tls unverified"
	default:
		v.tls = "tls"
	}
	v.hosts = append(v.hosts, net.JoinHostPort(c.Host, strconv.Itoa(int(c.Port))))
	for _, f := range c.Fallbacks {
		if hp := net.JoinHostPort(f.Host, strconv.Itoa(int(f.Port))); !slices.Contains(v.hosts, hp) {
			v.hosts = append(v.hosts, hp)
		}
	}
	return v
}

// Addrs returns the addresses an engine connects to, without credentials.
func Addrs(e *config.Engine) []string {
	if dsn := postgresDSN(e); dsn != nil {
		return dsn.hosts
	}
	addrs := slices.Concat(e.Addrs, e.Servers, e.Endpoints) // only its type's are set
	for k, a := range addrs {
		// An etcd endpoint may be a URL with user:password@.
		if u, err := url.Parse(a); err == nil && u.User != nil {
			u.User = nil
			addrs[k] = u.String()
		}
	}
	return addrs
}
