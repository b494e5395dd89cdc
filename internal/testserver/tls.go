package testserver

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/internal/freeport"
)

// ServerName is the DNS name in the server certificates of Certs (beside
// the IP address 127.0.0.1).
const ServerName = "localhost"

// Certs is a throw-away certificate authority and the certificates it
// signed, as PEM files in Dir, made with crypto/x509 for one test: a server
// certificate for ServerName and 127.0.0.1, and a client certificate for
// mutual TLS. Keys are ECDSA P-256.
type Certs struct {
	Dir    string
	CAFile string
	// ServerCertFile and ServerKeyFile are the servers' certificate and
	// key; ServerPEM holds both (ZooKeeper's PEM key store).
	ServerCertFile, ServerKeyFile, ServerPEM string
	// ClientCertFile and ClientKeyFile are a client certificate (CN
	// "client") and its key.
	ClientCertFile, ClientKeyFile string

	ca    *x509.Certificate
	caKey *ecdsa.PrivateKey
}

// NewCerts makes a CA, a server and a client certificate in dir.
func NewCerts(dir string) (*Certs, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("testserver: CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "orthrus test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("testserver: CA certificate: %w", err)
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("testserver: CA certificate: %w", err)
	}
	c := &Certs{Dir: dir, CAFile: filepath.Join(dir, "ca.pem"), ca: ca, caKey: key}
	if err := writePEM(c.CAFile, pemBlock("CERTIFICATE", der)); err != nil {
		return nil, err
	}
	if c.ServerCertFile, c.ServerKeyFile, err = c.Issue("server", true); err != nil {
		return nil, err
	}
	if c.ClientCertFile, c.ClientKeyFile, err = c.Issue("client", false); err != nil {
		return nil, err
	}
	// ZooKeeper reads the key and the certificate from one PEM file.
	c.ServerPEM = filepath.Join(dir, "server-bundle.pem")
	var bundle []byte
	for _, f := range []string{c.ServerKeyFile, c.ServerCertFile} {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("testserver: %w", err)
		}
		bundle = append(bundle, b...)
	}
	if err := writePEM(c.ServerPEM, bundle); err != nil {
		return nil, err
	}
	return c, nil
}

// Issue signs a new certificate with common name cn, for a server
// (ServerName, 127.0.0.1) or a client, and writes it and its key as
// <cn>.pem and <cn>-key.pem. Client certificates also name 127.0.0.1,
// which ZooKeeper's hostname verification of clients wants.
func (c *Certs) Issue(cn string, server bool) (certFile, keyFile string, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", fmt.Errorf("testserver: key for %q: %w", cn, err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return "", "", fmt.Errorf("testserver: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	if server {
		tmpl.DNSNames = []string{ServerName}
		// etcd also uses its server certificate as a client of itself.
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	} else {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.ca, &key.PublicKey, c.caKey)
	if err != nil {
		return "", "", fmt.Errorf("testserver: certificate for %q: %w", cn, err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return "", "", fmt.Errorf("testserver: key for %q: %w", cn, err)
	}
	certFile = filepath.Join(c.Dir, cn+".pem")
	keyFile = filepath.Join(c.Dir, cn+"-key.pem")
	if err := writePEM(certFile, pemBlock("CERTIFICATE", der)); err != nil {
		return "", "", err
	}
	if err := writePEM(keyFile, pemBlock("PRIVATE KEY", keyDER)); err != nil {
		return "", "", err
	}
	return certFile, keyFile, nil
}

// ClientConfig returns a tls.Config that trusts the CA, presents the client
// certificate and expects ServerName.
func (c *Certs) ClientConfig() (*tls.Config, error) {
	return c.clientConfig(c.ClientCertFile, c.ClientKeyFile)
}

// ClientConfigAs is ClientConfig with a new client certificate whose common
// name is cn: an identity of its own, for servers that map certificates to
// users (ZooKeeper's x509 provider).
func (c *Certs) ClientConfigAs(cn string) (*tls.Config, error) {
	certFile, keyFile, err := c.Issue(cn, false)
	if err != nil {
		return nil, err
	}
	return c.clientConfig(certFile, keyFile)
}

func (c *Certs) clientConfig(certFile, keyFile string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("testserver: %w", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(c.ca)
	return &tls.Config{
		RootCAs:      pool,
		Certificates: []tls.Certificate{cert},
		ServerName:   ServerName,
		MinVersion:   tls.VersionTLS12,
	}, nil
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func writePEM(path string, b []byte) error {
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return fmt.Errorf("testserver: %w", err)
	}
	return nil
}

// WithTLS makes Redis, etcd and ZooKeeper servers also listen for TLS
// clients on a second port, TLSAddr, with the server certificate of certs
// and client certificates required (mutual TLS). The plain port stays open
// on loopback for the launcher's readiness probes and for test set-up.
func WithTLS(certs *Certs) Option {
	return func(o *options) { o.tls = certs }
}

// TLSAddr returns the "127.0.0.1:port" address of the TLS port, "" when
// the server was started without WithTLS.
func (s *Server) TLSAddr() string { return s.tlsAddr }

// TestCerts makes Certs in a temporary directory of the test.
func TestCerts(t testing.TB) *Certs {
	t.Helper()
	c, err := NewCerts(t.TempDir())
	if err != nil {
		t.Fatalf("%v", err)
	}
	return c
}

// addTLSPort picks the port of a server's TLS listener and records its
// address.
func (s *Server) addTLSPort() (int, error) {
	ports, err := freeport.Loopback(1)
	if err != nil {
		return 0, err
	}
	s.tlsAddr = hostPort(ports[0])
	return ports[0], nil
}

// redisTLSArgs opens a TLS port beside the plain one, requiring client
// certificates.
func (s *Server) redisTLSArgs(c *Certs) ([]string, error) {
	port, err := s.addTLSPort()
	if err != nil {
		return nil, err
	}
	return []string{
		"--tls-port", strconv.Itoa(port),
		"--tls-cert-file", c.ServerCertFile,
		"--tls-key-file", c.ServerKeyFile,
		"--tls-ca-cert-file", c.CAFile,
		"--tls-auth-clients", "yes",
	}, nil
}

// etcdTLSArgs adds an https client URL beside the plain one, requiring
// client certificates on it.
func (s *Server) etcdTLSArgs(c *Certs) error {
	port, err := s.addTLSPort()
	if err != nil {
		return err
	}
	for i := 0; i+1 < len(s.args); i++ {
		switch s.args[i] {
		case "--listen-client-urls", "--advertise-client-urls":
			s.args[i+1] += ",https://" + hostPort(port)
		}
	}
	s.args = append(s.args,
		"--cert-file", c.ServerCertFile,
		"--key-file", c.ServerKeyFile,
		"--trusted-ca-file", c.CAFile,
		"--client-cert-auth",
	)
	return nil
}

// zkTLSLines returns lines with the zoo.cfg settings of a secure client
// port added: the Netty connection factory (the NIO one has no TLS), PEM
// key and trust stores, client certificates required. zoo.cfg keys that
// ZooKeeper does not know become "zookeeper."-prefixed system properties,
// which is where it reads these.
func (s *Server) zkTLSLines(c *Certs, lines []string) ([]string, error) {
	port, err := s.addTLSPort()
	if err != nil {
		return nil, err
	}
	return append(lines[:len(lines):len(lines)],
		fmt.Sprintf("secureClientPort=%d", port),
		"secureClientPortAddress=127.0.0.1",
		"serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory",
		"ssl.keyStore.location="+c.ServerPEM,
		"ssl.keyStore.type=PEM",
		"ssl.trustStore.location="+c.CAFile,
		"ssl.trustStore.type=PEM",
		"ssl.clientAuth=need",
	), nil
}

// zkNettyJars are the Netty jars the Netty connection factory needs beyond
// those in the Class-Path of Debian's zookeeper.jar (3.8.0-11), which
// leaves out netty-codec: without them every TLS connection fails with
// NoClassDefFoundError io/netty/handler/codec/ByteToMessageDecoder.
var zkNettyJars = []string{"/usr/share/java/netty-codec.jar", "/usr/share/java/netty-resolver.jar", "/usr/share/java/netty-transport-native-unix-common.jar"}

// zkNettyClasspath adds zkNettyJars to the -cp of a java command line.
func zkNettyClasspath(args []string) []string {
	for i := 0; i+1 < len(args); i++ {
		if args[i] == "-cp" {
			for _, jar := range zkNettyJars {
				if _, err := os.Stat(jar); err == nil {
					args[i+1] += ":" + jar
				}
			}
		}
	}
	return args
}
