package proxy

import (
	"crypto/subtle"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/warren-sandbox/warren/internal/envdproto"
	"github.com/warren-sandbox/warren/internal/route"
)

// denied is a refusal decided before routing; the proxy answers it as is.
type denied struct {
	status int
	body   errBody
}

func (d *denied) Error() string { return fmt.Sprintf("%d %s", d.status, d.body.Message) }

// pausedBody is the 502 of a paused sandbox: the SDK reads 502 as "not
// running", and canAutoResume tells whether traffic with the right
// credentials would wake it.
func pausedBody(id string, canAutoResume bool) errBody {
	return errBody{SandboxID: id, Message: "The sandbox is paused", Code: 502, CanAutoResume: &canAutoResume}
}

// admit decides, before a paused sandbox is resumed, whether r may reach
// the sandbox: so that a request without credentials never wakes it.
//
//   - A port other than envd's, on a sandbox with a traffic access token,
//     needs that token in E2b-Traffic-Access-Token (always: the sandbox
//     cannot check it itself).
//   - envd's port, on a paused sandbox with an envd access token, needs
//     that token in X-Access-Token, or for /files a valid signature. A
//     running sandbox's envd checks its own token (the same rule).
//
// Tokens are compared in constant time.
func admit(r *http.Request, port int, a *route.Admission) error {
	if port != EnvdPort {
		if a.TrafficAccessToken == "" {
			return nil
		}
		tok := r.Header.Get(HeaderTrafficToken)
		hdr := strings.ToLower(HeaderTrafficToken)
		switch {
		case tok == "":
			return &denied{http.StatusForbidden, errBody{SandboxID: a.SandboxID, Message: fmt.Sprintf("Sandbox is secured with traffic access token. Token header '%s' is missing", hdr), Code: 403}}
		case !equal(tok, a.TrafficAccessToken):
			return &denied{http.StatusForbidden, errBody{SandboxID: a.SandboxID, Message: fmt.Sprintf("Sandbox is secured with traffic access token. Provided token in header '%s' is invalid", hdr), Code: 403}}
		}
		return nil
	}
	if !a.Paused || a.EnvdAccessToken == "" || envdAuthorized(r, a.EnvdAccessToken) {
		return nil
	}
	if r.URL.Path == "/health" {
		// envd answers /health without a token; asleep, it is not running.
		return &denied{http.StatusBadGateway, pausedBody(a.SandboxID, a.CanAutoResume)}
	}
	return &denied{http.StatusUnauthorized, errBody{SandboxID: a.SandboxID, Message: envdproto.MsgMissingToken, Code: 401}}
}

// envdAuthorized reports whether r carries envd's access token, or is a
// /files request with a valid, unexpired signature made with it (each
// signed parameter given once, as envd requires).
func envdAuthorized(r *http.Request, token string) bool {
	if equal(r.Header.Get(envdproto.AccessTokenHeader), token) {
		return true
	}
	if r.URL.Path != "/files" {
		return false
	}
	s, ok, err := envdproto.ParseSigned(r.URL.Query())
	return ok && err == nil && !s.Expired(time.Now().Unix()) && s.Valid(envdproto.FilesOp(r.Method), token)
}

// equal compares secrets in constant time; an empty got never matches.
func equal(got, want string) bool {
	return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}
