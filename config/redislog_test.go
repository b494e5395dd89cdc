package config_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/orthrus-go/orthrus/config"
)

// redisLogChild carries the Redis address to the test binary that
// TestOpenRoutesGoRedisLogs runs again, whose stderr it reads.
const redisLogChild = "ORTHRUS_REDIS_LOG_CHILD"

// go-redis's line for a dial that failed (here, a Redis engine down at
// start) goes to Open's logger, not to stderr.
func TestOpenRoutesGoRedisLogs(t *testing.T) {
	if os.Getenv(redisLogChild) != "" {
		openWithDeadRedis(t)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestOpenRoutesGoRedisLogs$", "-test.count", "1")
	cmd.Env = append(os.Environ(), redisLogChild+"="+redisAddr)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("child: %v\nstdout:\n%s\nstderr:\n%s", err, &stdout, &stderr)
	}
	const line = "connection pool: failed to dial"
	if !strings.Contains(stdout.String(), `level=WARN msg="go-redis: `+line) {
		t.Errorf("Open's logger got:\n%s\nwant a WARN with go-redis's %q", &stdout, line)
	}
	if strings.Contains(stderr.String(), line) {
		t.Errorf("stderr got:\n%s\nwant no go-redis line", &stderr)
	}
}

// openWithDeadRedis opens a switcher whose first engine refuses
// connections, logging to stdout.
func openWithDeadRedis(t *testing.T) {
	c := loadYAML(t, fmt.Sprintf(`
start_timeout: 500ms
engines:
  - {name: dead, type: redis, addrs: ["127.0.0.1:1"]}
  - {name: good, type: redis, addrs: [%q]}
`, redisAddr))
	sw, err := config.Open(context.Background(), c, config.WithLogger(slog.New(slog.NewTextHandler(os.Stdout, nil))))
	if err != nil {
		t.Fatalf("Open() = %v", err)
	}
	if err := sw.Close(); err != nil {
		t.Errorf("Close() = %v", err)
	}
}
