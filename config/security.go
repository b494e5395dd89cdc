package config

import (
	"context"
	"crypto/tls"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/orthrus-go/orthrus/locker"
)

// Secrets come from the file, its environment overrides, or files named by
// the *_file settings; they are never logged and never part of an error.

// secretFile is one secret setting and the file setting that may hold it;
// foreign when the setting is not one of the engine's or source's type,
// which validate reports.
type secretFile struct {
	field, fileField string
	value, file      *string
	foreign          bool
}

func (c *Config) secretFiles() []secretFile {
	var out []secretFile
	for i := range c.Engines {
		e := &c.Engines[i]
		f := fmt.Sprintf("engines[%d].", i)
		not := func(key string) bool { return !contains(settingsOf[key], e.Type) }
		out = append(out,
			secretFile{f + "password", f + "password_file", &e.Password, &e.PasswordFile, not("password_file")},
			secretFile{f + "dsn", f + "dsn_file", &e.DSN, &e.DSNFile, not("dsn_file")},
			secretFile{f + "sentinel_password", f + "sentinel_password_file", &e.SentinelPassword, &e.SentinelPasswordFile, not("sentinel_password_file")},
			secretFile{f + "auth.credentials", f + "auth.credentials_file", &e.Auth.Credentials, &e.Auth.CredentialsFile, not("auth")},
		)
	}
	src := c.Source.Type
	return append(out,
		secretFile{"source.password", "source.password_file", &c.Source.Password, &c.Source.PasswordFile, src != SourceEtcd},
		secretFile{"source.auth.credentials", "source.auth.credentials_file", &c.Source.Auth.Credentials, &c.Source.Auth.CredentialsFile, src != SourceZK},
	)
}

// readSecretFiles reads the secrets named by *_file settings into their
// settings, once: Load does it, and Open for a Config built in code. A
// secret given both ways, or a file that cannot be read or is empty, is a
// FieldError naming the *_file setting.
func (c *Config) readSecretFiles() []*FieldError {
	if c.secretsRead {
		return nil
	}
	var problems []*FieldError
	for _, s := range c.secretFiles() {
		if *s.file == "" || s.foreign {
			continue
		}
		if *s.value != "" {
			problems = append(problems, &FieldError{Field: s.fileField, Msg: fmt.Sprintf("set together with %s (or its environment variable); use one", s.field)})
			continue
		}
		b, err := os.ReadFile(*s.file)
		if err != nil {
			problems = append(problems, &FieldError{Field: s.fileField, Msg: err.Error()})
			continue
		}
		v := strings.TrimRight(string(b), "\r\n")
		if v == "" {
			problems = append(problems, &FieldError{Field: s.fileField, Msg: fmt.Sprintf("%s is empty", *s.file)})
			continue
		}
		*s.value = v
	}
	if len(problems) == 0 {
		c.secretsRead = true
	}
	return problems
}

// openCopy returns the copy of cfg that Open and prepare work on: its
// secret files read, validated, its defaults filled in.
func (cfg *Config) openCopy() (*Config, error) {
	c := cfg.clone()
	if problems := c.readSecretFiles(); len(problems) > 0 {
		return nil, &ValidationError{File: c.file, Fields: problems}
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	c.setDefaults()
	return c, nil
}

// keyPair loads a client certificate and its key, naming the setting at
// fault: cert_file when the certificate cannot be read or parsed, key_file
// when the key cannot, or does not match.
func keyPair(field, certFile, keyFile string) (tls.Certificate, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return tls.Certificate{}, &FieldError{Field: field + ".cert_file", Msg: err.Error()}
	}
	if !hasPEM(certPEM, "CERTIFICATE") {
		return tls.Certificate{}, &FieldError{Field: field + ".cert_file", Msg: fmt.Sprintf("no PEM certificate in %s", certFile)}
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return tls.Certificate{}, &FieldError{Field: field + ".key_file", Msg: err.Error()}
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return tls.Certificate{}, &FieldError{Field: field + ".key_file", Msg: fmt.Sprintf("%s with %s: %v", keyFile, certFile, err)}
	}
	return cert, nil
}

// hasPEM tells whether b holds a PEM block of type typ that parses.
func hasPEM(b []byte, typ string) bool {
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			return false
		}
		if block.Type == typ {
			return true
		}
	}
}

// authRefused tells the errors of a client that the server refused to
// authenticate before any engine existed (clientv3.New authenticates).
func authRefused(err error) bool {
	for _, r := range []error{rpctypes.ErrAuthFailed, rpctypes.ErrPermissionDenied, rpctypes.ErrUserEmpty, rpctypes.ErrUserNotFound} {
		if errors.Is(err, r) {
			return true
		}
	}
	return false
}

// etcdServerName returns the dial option that makes gRPC verify the etcd
// servers against tls.server_name: gRPC otherwise verifies the endpoint's
// host and ignores tls.Config.ServerName.
func etcdServerName(conf *tls.Config) []grpc.DialOption {
	if conf == nil || conf.ServerName == "" {
		return nil
	}
	return []grpc.DialOption{grpc.WithTransportCredentials(namedCreds{credentials.NewTLS(conf), conf.ServerName})}
}

// namedCreds are TLS transport credentials that verify one server name
// whatever the address dialled.
type namedCreds struct {
	credentials.TransportCredentials
	name string
}

func (c namedCreds) ClientHandshake(ctx context.Context, _ string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return c.TransportCredentials.ClientHandshake(ctx, c.name, conn)
}

func (c namedCreds) Clone() credentials.TransportCredentials {
	return namedCreds{c.TransportCredentials.Clone(), c.name}
}

// tlsProbeTimeout bounds explainTLS's own handshake.
const tlsProbeTimeout = time.Second

// explainTLS adds to err, a failed first contact, why a TLS handshake with
// the first endpoint fails, if it does: the etcd client reports only its
// deadline when it never gets a connection.
func explainTLS(ctx context.Context, err error, endpoints []string, t *TLS, field string) error {
	conf, cerr := t.config(field)
	if cerr != nil || conf == nil || len(endpoints) == 0 {
		return err
	}
	addr := endpoints[0]
	if _, rest, ok := strings.Cut(addr, "://"); ok {
		addr = rest
	}
	if conf.ServerName == "" {
		host, _, serr := net.SplitHostPort(addr)
		if serr != nil {
			return err
		}
		conf.ServerName = host
	}
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), tlsProbeTimeout)
	defer cancel()
	d := tls.Dialer{Config: conf}
	conn, herr := d.DialContext(hctx, "tcp", addr)
	if herr == nil {
		// With TLS 1.3 the server refuses a client certificate after the
		// handshake: its alert is the first thing to read.
		_ = conn.SetReadDeadline(time.Now().Add(tlsProbeTimeout / 4))
		_, herr = conn.Read(make([]byte, 1))
		conn.Close()
		var ne net.Error
		if errors.As(herr, &ne) && ne.Timeout() {
			herr = nil
		}
	}
	if herr == nil || !strings.Contains(herr.Error(), "tls") {
		return err
	}
	return fmt.Errorf("%w (tls with %s: %v)", err, addr, herr)
}

// permissionDenied tells whether a failure to start an engine is a refused
// user, and returns it wrapping ErrPermission (a breaker must not count
// it) if so.
func permissionDenied(err error) (error, bool) {
	switch {
	case errors.Is(err, locker.ErrPermission):
		return err, true
	case authRefused(err):
		return fmt.Errorf("%w: %w", locker.ErrPermission, err), true
	}
	return err, false
}
