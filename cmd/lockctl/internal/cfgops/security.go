package cfgops

import (
	"strings"

	"github.com/orthrus-go/orthrus/config"
)

// Security summarises how the engine connects and authenticates, for
// operators (lockctl status), without any secret: "tls mutual, user app1,
// password from file".
func Security(e *config.Engine) string {
	var parts []string
	switch {
	case !e.TLS.Enabled:
		parts = append(parts, "no tls")
	case e.TLS.InsecureSkipVerify:
		parts = append(parts, "tls unverified")
	case e.TLS.CertFile != "":
		parts = append(parts, "tls mutual")
	default:
		parts = append(parts, "tls")
	}
	if e.Username != "" {
		parts = append(parts, "user "+e.Username)
	}
	switch {
	case e.PasswordFile != "":
		parts = append(parts, "password from file")
	case e.Password != "":
		parts = append(parts, "password")
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
