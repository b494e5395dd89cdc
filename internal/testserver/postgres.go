package testserver

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
)

// PostgreSQL refuses to run as root: as root, the servers run as this user
// (made by Debian's postgresql package), in a directory it owns.
const postgresUser = "postgres"

// NewPostgres runs initdb in a fresh directory and starts a PostgreSQL
// server on a free loopback port, with trust authentication for the
// superuser "postgres" and no Unix socket, and waits until it accepts
// connections (pg_isready). fsync is off: a killed server keeps what it
// committed (the kernel has it), only a machine crash would lose it. With
// WithTLS the same port also takes TLS connections, which must present a
// client certificate signed by the test CA. The caller must Stop it.
func NewPostgres(opts ...Option) (*Server, error) {
	o := buildOptions(opts)
	bin, err := postgresBin("postgres")
	if err != nil {
		return nil, err
	}
	initdb, err := postgresBin("initdb")
	if err != nil {
		return nil, err
	}
	ready, err := postgresBin("pg_isready")
	if err != nil {
		return nil, err
	}
	cred, err := postgresCredential()
	if err != nil {
		return nil, err
	}
	if cred != nil {
		// The directories under the test's own are not the user's to enter.
		o.base = ""
	}
	return startSingle(o, "postgres", func(root string, owned bool, port int) (*Server, error) {
		s, err := newServer("postgres", hostPort(port), root, bin, owned, o)
		if err != nil {
			return nil, err
		}
		s.cred, s.group, s.stopSignal = cred, true, syscall.SIGINT // fast shutdown
		s.env = environ("PG")
		if err := s.initdb(initdb, o); err != nil {
			return nil, err
		}
		s.args = []string{"-D", s.dir, "-p", strconv.Itoa(port),
			"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=",
			"-c", "fsync=off", "-c", "full_page_writes=off", "-c", "max_connections=300"}
		if o.tls != nil {
			s.tlsAddr = s.addr
			s.args = append(s.args, "-c", "ssl=on",
				"-c", "ssl_cert_file="+filepath.Join(root, "server.crt"),
				"-c", "ssl_key_file="+filepath.Join(root, "server.key"),
				"-c", "ssl_ca_file="+filepath.Join(root, "ca.crt"))
		}
		s.args = append(s.args, o.args...)
		s.probe = func(ctx context.Context) error {
			out, err := exec.CommandContext(ctx, ready, "-q", "-h", "127.0.0.1", "-p", strconv.Itoa(port), "-U", postgresUser).CombinedOutput()
			if err != nil {
				return fmt.Errorf("pg_isready: %w %s", err, out)
			}
			return nil
		}
		return s, nil
	})
}

// DSN returns a connection string for the superuser "postgres" on the
// plain (non-TLS) connection.
func (s *Server) DSN() string {
	return "postgres://" + postgresUser + "@" + s.addr + "/postgres?sslmode=disable"
}

// initdb makes the data directory, its client authentication rules and,
// with TLS, the server's certificate files, all owned by the server's user.
func (s *Server) initdb(bin string, o *options) error {
	hba := "hostnossl all all 127.0.0.1/32 trust\n"
	if o.tls != nil {
		hba += "hostssl all all 127.0.0.1/32 trust clientcert=verify-ca\n"
		for from, to := range map[string]string{o.tls.ServerCertFile: "server.crt", o.tls.ServerKeyFile: "server.key", o.tls.CAFile: "ca.crt"} {
			if err := copyFile(from, filepath.Join(s.root, to)); err != nil {
				return err
			}
		}
	}
	if err := s.own(s.root); err != nil {
		return err
	}
	log, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("testserver: %w", err)
	}
	defer log.Close()
	cmd := exec.Command(bin, "-D", s.dir, "-U", postgresUser, "-A", "trust", "-E", "UTF8", "--no-sync", "--no-instructions")
	cmd.Env, cmd.Stdout, cmd.Stderr = s.env, log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	if err := cmd.Run(); err != nil {
		return s.failure("initdb: %v", err)
	}
	hbaPath := filepath.Join(s.dir, "pg_hba.conf")
	if err := os.WriteFile(hbaPath, []byte(hba), 0o600); err != nil {
		return fmt.Errorf("testserver: %w", err)
	}
	return s.own(hbaPath)
}

// own gives path and everything under it to the server's user.
func (s *Server) own(path string) error {
	if s.cred == nil {
		return nil
	}
	return filepath.Walk(path, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, int(s.cred.Uid), int(s.cred.Gid))
	})
}

func copyFile(from, to string) error {
	b, err := os.ReadFile(from)
	if err == nil {
		err = os.WriteFile(to, b, 0o600)
	}
	if err != nil {
		return fmt.Errorf("testserver: %w", err)
	}
	return nil
}

// postgresCredential is the user the servers run as: the postgres user
// when the tests run as root, nil (the current user) otherwise.
func postgresCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup(postgresUser)
	if err != nil {
		return nil, fmt.Errorf("%w: user %s: %w (apt-get install postgresql)", ErrNotInstalled, postgresUser, err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("testserver: user %s: %w", postgresUser, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("testserver: user %s: %w", postgresUser, err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// postgresBin finds a server program: Debian keeps them in
// /usr/lib/postgresql/<version>/bin, out of PATH; the newest version wins.
func postgresBin(name string) (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return pgVersion(dirs[i]) > pgVersion(dirs[j]) })
	for _, dir := range dirs {
		p := filepath.Join(dir, name)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return lookBin(name, "postgresql")
}

// pgVersion reads the version out of /usr/lib/postgresql/<version>/bin.
func pgVersion(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}
