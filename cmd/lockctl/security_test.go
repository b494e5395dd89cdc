package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/orthrus-go/orthrus/config"
	"github.com/orthrus-go/orthrus/internal/testserver"
)

// lockctl status says how each engine is secured, never with its secret.
func TestStatusSecurity(t *testing.T) {
	const secret = "status-pw-51c0e2"
	s := testserver.Redis(t)
	if err := testserver.RedisACL(s, "app1", secret, "~*", "&*", "+@all"); err != nil {
		t.Fatal(err)
	}
	pwFile := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pwFile, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := writeOpsConfig(t, "env", []string{
		fmt.Sprintf(`{name: env, type: redis, addrs: [%q], username: app1}`, s.Addr()),
		fmt.Sprintf(`{name: file, type: redis, addrs: [%q], username: app1, password_file: %q}`, s.Addr(), pwFile),
	})
	t.Setenv(config.EnvName("env", "password"), secret) // the child inherits it
	code, out, errOut := lockctlRun(t, "", "status", "--config", path)
	if code != 0 {
		t.Fatalf("lockctl status: exit %d, stderr %q; want 0", code, errOut)
	}
	for _, want := range []string{"SECURITY", "no tls, user app1, password ", "no tls, user app1, password from file"} {
		if !strings.Contains(out, want) {
			t.Errorf("lockctl status:\n%s\nwant %q", out, want)
		}
	}
	if strings.Contains(out+errOut, secret) {
		t.Errorf("lockctl status shows the secret:\n%s%s", out, errOut)
	}
}
