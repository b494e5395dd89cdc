package testserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/orthrus-go/orthrus/internal/freeport"
)

// ErrNotInstalled is returned (wrapped) when a server binary is missing.
var ErrNotInstalled = errors.New("testserver: server binary not installed")

const (
	defaultStartTimeout = 30 * time.Second
	stopTimeout         = 10 * time.Second
	pollInterval        = 25 * time.Millisecond
	probeTimeout        = 500 * time.Millisecond
	logTail             = 64 << 10
	startAttempts       = 3
)

// Option configures a server started by this package.
type Option func(*options)

type options struct {
	args    []string
	timeout time.Duration
	base    string // parent of the temporary directories; "" = os.TempDir, removed by Stop
	tls     *Certs // WithTLS
	// replicas per master of a Redis Cluster (WithReplicas)
	replicas int
}

// WithArgs appends extra configuration. For Redis and etcd the strings are
// appended to the command line as they are (e.g. "--maxmemory", "10mb"); for
// ZooKeeper each string is a zoo.cfg line (e.g. "maxClientCnxns=0").
func WithArgs(extra ...string) Option {
	return func(o *options) { o.args = append(o.args, extra...) }
}

// WithReplicas gives each master of a Redis Cluster (NewRedisCluster)
// n replicas. Default: none.
func WithReplicas(n int) Option {
	return func(o *options) { o.replicas = n }
}

// WithStartTimeout sets how long a constructor or Restart waits for the
// server to become ready (default 30s).
func WithStartTimeout(d time.Duration) Option {
	return func(o *options) { o.timeout = d }
}

// withBase makes temporary directories under dir and leaves their removal to
// the owner of dir (the testing wrappers pass t.TempDir()).
func withBase(dir string) Option {
	return func(o *options) { o.base = dir }
}

func buildOptions(opts []Option) *options {
	o := &options{timeout: defaultStartTimeout}
	for _, opt := range opts {
		opt(o)
	}
	if o.timeout <= 0 {
		o.timeout = defaultStartTimeout
	}
	return o
}

// mkRoot makes a fresh temporary directory for a server or a cluster and
// tells whether Stop must remove it.
func (o *options) mkRoot(pattern string) (string, bool, error) {
	if o.base == "" {
		// /dev/shm when the machine has one: the fsyncs of etcd's and
		// ZooKeeper's logs then cost memory writes, not disk flushes (a
		// contended hand-off is two of them on etcd).
		if dir, err := os.MkdirTemp("/dev/shm", "testserver-"+pattern+"-*"); err == nil {
			return dir, true, nil
		}
	}
	dir, err := os.MkdirTemp(o.base, "testserver-"+pattern+"-*")
	if err != nil {
		return "", false, fmt.Errorf("testserver: %w", err)
	}
	return dir, o.base == "", nil
}

// Server is one server process.
type Server struct {
	name    string // "redis-server", "zookeeper", "etcd"
	addr    string
	tlsAddr string // WithTLS: the TLS port
	root    string // holds the config, the log and dir
	dir     string
	logPath string
	bin     string
	args    []string
	env     []string
	timeout time.Duration
	owned   bool // Stop removes root
	// cred runs the process as another user (PostgreSQL refuses root).
	cred *syscall.Credential
	// group: the server is a process and its children (PostgreSQL's
	// postmaster and backends), which signals reach as a whole: a pause
	// of the postmaster alone would leave its backends answering.
	group bool
	// stopSignal asks the server to stop (SIGTERM unless set).
	stopSignal syscall.Signal

	// probe tells whether the server is ready; Restart and the
	// constructors poll it.
	probe func(ctx context.Context) error

	mu      sync.Mutex
	proc    *process
	paused  bool
	removed bool
	logs    string // the log tail kept when root is removed

	live atomic.Bool // running and not paused
}

type process struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error // cmd.Wait's result, set before done is closed
}

// Addr returns the "127.0.0.1:port" address clients connect to.
func (s *Server) Addr() string { return s.addr }

// CPU returns the user and system time the running server has used so
// far, with its child processes' (PostgreSQL's backends): benchmarks take
// it before and after.
func (s *Server) CPU() (time.Duration, error) {
	pid := s.Pid()
	if pid == 0 {
		return 0, fmt.Errorf("testserver: CPU of %s: not running", s)
	}
	return treeCPU(pid)
}

// Pid returns the process ID of the running server, 0 when it is stopped.
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return 0
	}
	return s.proc.cmd.Process.Pid
}

// Dir returns the server's data directory.
func (s *Server) Dir() string { return s.dir }

// String returns the server's name and address, e.g. "redis-server on 127.0.0.1:1234".
func (s *Server) String() string { return s.name + " on " + s.addr }

// Logs returns the tail (up to 64 KiB) of the server's output, across restarts.
func (s *Server) Logs() string {
	s.mu.Lock()
	if s.removed {
		defer s.mu.Unlock()
		return s.logs
	}
	s.mu.Unlock()
	return readTail(s.logPath, logTail)
}

func readTail(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() > n {
		if _, err := f.Seek(-n, io.SeekEnd); err != nil {
			return ""
		}
	}
	b, _ := io.ReadAll(f)
	return string(b)
}

// failure builds an error naming the server and including its log tail.
func (s *Server) failure(format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	tail := readTail(s.logPath, logTail) // not s.Logs: s.mu may be held
	if len(tail) > 4096 {
		tail = "..." + tail[len(tail)-4096:]
	}
	return fmt.Errorf("testserver: %s %s: log tail:\n%s", s, msg, tail)
}

// start launches the process; s.mu must be held.
func (s *Server) start() error {
	if s.proc != nil {
		return fmt.Errorf("testserver: %s is already running", s)
	}
	f, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("testserver: %s: %w", s, err)
	}
	fmt.Fprintf(f, "\n==== testserver: starting %s %s at %s ====\n", s.bin, strings.Join(s.args, " "), time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(s.bin, s.args...)
	cmd.Dir = s.root
	cmd.Env = s.env
	cmd.Stdout = f // an *os.File: exec starts no copying goroutine
	cmd.Stderr = f
	cmd.SysProcAttr = sysProcAttr()
	cmd.SysProcAttr.Credential = s.cred
	err = cmd.Start()
	f.Close()
	if err != nil {
		return fmt.Errorf("testserver: starting %s: %w", s, err)
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() { // ends when the child exits; Stop and Kill wait for it
		p.err = cmd.Wait()
		close(p.done)
	}()
	s.proc = p
	s.paused = false
	s.live.Store(true)
	return nil
}

// errExited marks a server that exited while we waited for it to be ready
// (typically a port taken between picking and binding it).
var errExited = errors.New("exited")

// waitReady polls probe until it succeeds, the process exits or ctx ends.
// s.mu must be held.
func (s *Server) waitReady(ctx context.Context, probe func(context.Context) error) error {
	p := s.proc
	if p == nil {
		return fmt.Errorf("testserver: %s is not running", s)
	}
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	var last error
	for {
		pctx, cancel := context.WithTimeout(ctx, probeTimeout)
		last = probe(pctx)
		cancel()
		if last == nil {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("%w: %w", errExited, s.failure("exited before it was ready (%v)", p.err))
		case <-ctx.Done():
			return s.failure("not ready after %v: %v", s.timeout, last)
		case <-t.C:
		}
	}
}

// halt stops the process: SIGTERM (or SIGKILL), bounded wait, then SIGKILL.
// s.mu must be held.
func (s *Server) halt(sig syscall.Signal) error {
	p := s.proc
	if p == nil {
		return nil
	}
	s.live.Store(false)
	if sig == syscall.SIGTERM && s.stopSignal != 0 {
		sig = s.stopSignal
	}
	_ = s.signal(sig)
	if s.paused {
		_ = s.signal(syscall.SIGCONT)
	}
	t := time.NewTimer(stopTimeout)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		_ = s.signal(syscall.SIGKILL)
		<-p.done
	}
	s.proc = nil
	s.paused = false
	return nil
}

// signal sends sig to the server's process and, for a group, to its
// children, listed before the parent is signalled (a killed parent's
// children are another's at once) and after (a child forked meanwhile).
// s.mu must be held and the server running.
func (s *Server) signal(sig syscall.Signal) error {
	pid := s.proc.cmd.Process.Pid
	var kids []int
	if s.group {
		kids = children(pid)
	}
	err := s.proc.cmd.Process.Signal(sig)
	if s.group {
		for _, kid := range append(kids, children(pid)...) {
			_ = syscall.Kill(kid, sig) // it may have exited meanwhile
		}
	}
	return err
}

// Stop terminates the server (SIGTERM, then SIGKILL after 10s) and waits for
// it to exit. Servers made by the New* constructors also remove their
// temporary directory, after which Restart fails; the testing wrappers keep it
// until the test ends, so Stop followed by Restart works there. Stop is
// idempotent.
func (s *Server) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	err := s.halt(syscall.SIGTERM)
	if s.owned && !s.removed {
		s.logs = readTail(s.logPath, logTail)
		s.removed = true
		if rerr := os.RemoveAll(s.root); rerr != nil && err == nil {
			err = fmt.Errorf("testserver: removing %s: %w", s.root, rerr)
		}
	}
	return err
}

// Kill sends SIGKILL and waits for the process to exit. The data directory
// is kept, so Restart brings the server back with its persisted state.
func (s *Server) Kill() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return nil
	}
	return s.halt(syscall.SIGKILL)
}

// Pause freezes the server with SIGSTOP: connections stay open but nothing
// answers.
func (s *Server) Pause() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return fmt.Errorf("testserver: pause %s: not running", s)
	}
	if err := s.signal(syscall.SIGSTOP); err != nil {
		return fmt.Errorf("testserver: pause %s: %w", s, err)
	}
	// Frozen when Pause returns: no request sent after it is answered.
	for deadline := time.Now().Add(5 * time.Second); !stopped(s.proc.cmd.Process.Pid); {
		if time.Now().After(deadline) {
			return fmt.Errorf("testserver: pause %s: not stopped 5s after SIGSTOP", s)
		}
		time.Sleep(time.Millisecond)
	}
	s.paused = true
	s.live.Store(false)
	return nil
}

// Resume continues a paused server with SIGCONT.
func (s *Server) Resume() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return fmt.Errorf("testserver: resume %s: not running", s)
	}
	if err := s.signal(syscall.SIGCONT); err != nil {
		return fmt.Errorf("testserver: resume %s: %w", s, err)
	}
	s.paused = false
	s.live.Store(true)
	return nil
}

// Restart stops the server if it runs (resuming it first if paused), starts
// it again on the same port with the same data directory and waits until it
// is ready. A member of a ZooKeeper ensemble or an etcd cluster is waited
// for until it serves when a quorum of its cluster is up, otherwise only
// until its process answers.
func (s *Server) Restart() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.removed {
		return fmt.Errorf("testserver: restart %s: stopped and its directory removed", s)
	}
	if err := s.halt(syscall.SIGTERM); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	var err error
	for attempt := 0; attempt < startAttempts; attempt++ {
		if err = s.start(); err != nil {
			return err
		}
		if err = s.waitReady(ctx, s.probe); err == nil {
			return nil
		}
		_ = s.halt(syscall.SIGKILL)
		if !errors.Is(err, errExited) {
			break
		}
	}
	return err
}

// launch starts servers and waits until each one's probe succeeds; on
// failure it kills all of them.
// startSingle starts one server in a fresh directory on a free port, made
// by newServer, and tries again on a new port when the start fails (another
// process may have taken the port in between).
func startSingle(o *options, pattern string, newServer func(root string, owned bool, port int) (*Server, error)) (*Server, error) {
	var s *Server
	err := retry(func() error {
		root, owned, err := o.mkRoot(pattern)
		if err != nil {
			return err
		}
		ports, err := freeport.Loopback(1)
		if err == nil {
			s, err = newServer(root, owned, ports[0])
		}
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
			err = launch(ctx, []*Server{s})
			cancel()
		}
		if err != nil {
			os.RemoveAll(root)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

func launch(ctx context.Context, servers []*Server) error {
	for _, s := range servers {
		s.mu.Lock()
		err := s.start()
		s.mu.Unlock()
		if err != nil {
			killAll(servers)
			return err
		}
	}
	for _, s := range servers {
		s.mu.Lock()
		err := s.waitReady(ctx, s.probe)
		s.mu.Unlock()
		if err != nil {
			killAll(servers)
			return err
		}
	}
	return nil
}

func killAll(servers []*Server) {
	for _, s := range servers {
		_ = s.Kill()
	}
}

// retry runs try up to startAttempts times while it fails because a server
// exited early (a port was taken between picking and binding it).
func retry(try func() error) error {
	var err error
	for attempt := 0; attempt < startAttempts; attempt++ {
		if err = try(); err == nil || !errors.Is(err, errExited) {
			return err
		}
	}
	return err
}

func hostPort(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// lookBin finds a binary in PATH or /usr/bin (or /usr/sbin).
func lookBin(name, pkg string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, dir := range []string{"/usr/bin", "/usr/sbin", "/usr/local/bin"} {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w: %s not found (apt-get install %s)", ErrNotInstalled, name, pkg)
}

// newServer fills in the common fields; root must exist.
func newServer(name, addr, root, bin string, owned bool, o *options) (*Server, error) {
	s := &Server{
		name:    name,
		addr:    addr,
		root:    root,
		dir:     filepath.Join(root, "data"),
		logPath: filepath.Join(root, name+".log"),
		bin:     bin,
		timeout: o.timeout,
		owned:   owned,
	}
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return nil, fmt.Errorf("testserver: %w", err)
	}
	return s, nil
}

// Cluster is a group of servers that form one cluster: Redis Cluster masters,
// a ZooKeeper ensemble or etcd members.
type Cluster struct {
	Servers []*Server

	root     string
	owned    bool
	isLeader func(ctx context.Context, s *Server) (bool, error)
}

// Addrs returns every server's client address, in order.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.Servers))
	for i, s := range c.Servers {
		addrs[i] = s.Addr()
	}
	return addrs
}

// Stop kills every server (SIGKILL: a graceful stop of all etcd members at
// once makes the leader wait seconds for a leadership transfer) and removes
// the cluster's temporary directory. It is idempotent.
func (c *Cluster) Stop() error {
	var errs []error
	for _, s := range c.Servers {
		errs = append(errs, s.Kill())
	}
	for _, s := range c.Servers {
		errs = append(errs, s.Stop())
	}
	if c.owned && c.root != "" {
		for _, s := range c.Servers {
			s.mu.Lock()
			if !s.removed {
				s.logs = readTail(s.logPath, logTail)
				s.removed = true
			}
			s.mu.Unlock()
		}
		errs = append(errs, os.RemoveAll(c.root))
		c.root = ""
	}
	return errors.Join(errs...)
}

// Leader returns the server that currently claims leadership of a ZooKeeper
// ensemble (srvr reports "Mode: leader") or an etcd cluster (its status
// names itself as leader). Stopped and paused servers are skipped.
func (c *Cluster) Leader() (*Server, error) {
	if c.isLeader == nil {
		return nil, errors.New("testserver: Leader is only supported for ZooKeeper and etcd clusters")
	}
	var errs []error
	for _, s := range c.Servers {
		if !s.live.Load() {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
		ok, err := c.isLeader(ctx, s)
		cancel()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if ok {
			return s, nil
		}
	}
	return nil, fmt.Errorf("testserver: no leader among %v: %w", c.Addrs(), errors.Join(errs...))
}

// WaitLeader polls Leader until a leader is found or timeout passes.
func (c *Cluster) WaitLeader(timeout time.Duration) (*Server, error) {
	deadline := time.Now().Add(timeout)
	for {
		s, err := c.Leader()
		if err == nil || time.Now().After(deadline) {
			return s, err
		}
		time.Sleep(pollInterval)
	}
}

// quorumLive tells whether a majority of the cluster is running and not
// paused.
func (c *Cluster) quorumLive() bool {
	n := 0
	for _, s := range c.Servers {
		if s.live.Load() {
			n++
		}
	}
	return n > len(c.Servers)/2
}

// memberProbe waits for full readiness when a quorum is up, else only for
// the process to answer.
func (c *Cluster) memberProbe(full, alive func(context.Context) error) func(context.Context) error {
	return func(ctx context.Context) error {
		if c.quorumLive() {
			return full(ctx)
		}
		return alive(ctx)
	}
}

// newCluster makes the cluster's root and a subdirectory root for each of n
// members.
func newCluster(o *options, pattern string, n int) (*Cluster, []string, error) {
	root, owned, err := o.mkRoot(pattern)
	if err != nil {
		return nil, nil, err
	}
	c := &Cluster{root: root, owned: owned}
	roots := make([]string, n)
	for i := range roots {
		roots[i] = filepath.Join(root, fmt.Sprintf("node%d", i))
	}
	return c, roots, nil
}

// resetDirs empties the members' directories before a new attempt.
func resetDirs(roots []string) error {
	for _, r := range roots {
		if err := os.RemoveAll(r); err != nil {
			return err
		}
		if err := os.MkdirAll(r, 0o700); err != nil {
			return err
		}
	}
	return nil
}

// abort removes a cluster that failed to start.
func (c *Cluster) abort() {
	killAll(c.Servers)
	if c.owned {
		os.RemoveAll(c.root)
	}
}

// environ returns the environment without variables starting with prefix.
func environ(prefix string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if prefix == "" || !strings.HasPrefix(kv, prefix) {
			env = append(env, kv)
		}
	}
	return env
}
