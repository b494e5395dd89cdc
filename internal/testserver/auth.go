package testserver

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// RedisACL creates (or resets) the ACL user name with password and rules
// ("~app1:*", "+get", ...), over the server's plain port as the default
// user.
func RedisACL(s *Server, name, password string, rules ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	args := append([]string{"ACL", "SETUSER", name, "reset", "on", ">" + password}, rules...)
	if _, err := redisDo(ctx, s.Addr(), args...); err != nil {
		return fmt.Errorf("testserver: ACL SETUSER %s: %w", name, err)
	}
	return nil
}

// EtcdUser is an etcd user whose role grants readwrite on the keys under
// Prefix + "/" and nothing else.
type EtcdUser struct {
	Name, Password, Prefix string
}

// EtcdRootPassword is the password of the root user EtcdAuth creates.
const EtcdRootPassword = "root-secret"

// EtcdAuth creates a root user, then each user with a role of its own
// name, and enables authentication, through the server's plain port (the
// gRPC gateway). The readiness probe of Restart does not authenticate:
// restart such a server at your own risk.
func EtcdAuth(s *Server, users ...EtcdUser) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b64 := func(k string) string { return base64.StdEncoding.EncodeToString([]byte(k)) }
	type call struct {
		path string
		body any
	}
	calls := []call{
		{"/v3/auth/user/add", map[string]string{"name": "root", "password": EtcdRootPassword}},
		{"/v3/auth/user/grant", map[string]string{"user": "root", "role": "root"}},
	}
	for _, u := range users {
		// The range [prefix/, prefix0) is every key starting with "prefix/".
		calls = append(calls,
			call{"/v3/auth/role/add", map[string]string{"name": u.Name}},
			call{"/v3/auth/role/grant", map[string]any{"name": u.Name, "perm": map[string]string{
				"permType": "READWRITE", "key": b64(u.Prefix + "/"), "range_end": b64(u.Prefix + "0")}}},
			call{"/v3/auth/user/add", map[string]string{"name": u.Name, "password": u.Password}},
			call{"/v3/auth/user/grant", map[string]string{"user": u.Name, "role": u.Name}},
		)
	}
	calls = append(calls, call{"/v3/auth/enable", map[string]string{}})
	for _, c := range calls {
		body, err := json.Marshal(c.body)
		if err != nil {
			return err
		}
		code, out, err := httpDo(ctx, s.Addr(), "POST", c.path, string(body))
		if err != nil {
			return fmt.Errorf("testserver: %s: %w", c.path, err)
		}
		if code != http.StatusOK {
			return fmt.Errorf("testserver: %s: %d %s", c.path, code, strings.TrimSpace(string(out)))
		}
	}
	return nil
}
