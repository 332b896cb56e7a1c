// Package envdproto holds what envd's callers (the node agent, the control
// plane, the proxy) share of its wire protocol without linking the envd
// daemon: its protocol version, the access token header, the 401 messages
// and the signature of /files URLs.
package envdproto

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"net/url"
	"strconv"

	"github.com/warren-sandbox/warren/internal/errdefs"
)

// Version is the E2B envd protocol version Warren's envd implements. The
// behaviours the E2B SDKs gate on up to 0.6.4 (closeStdin, octet-stream
// and gzip uploads, file metadata, includeEntry, allowNetworkMounts) are
// all implemented; the later 0.6.x additions (/freeze, /unfreeze,
// /collapse, /fsfreeze, /files/compose, volume mounts) are not, so 0.6.4
// is reported rather than upstream's newest.
const Version = "0.6.4"

// Port is envd's port inside every sandbox (E2B's), the one definition:
// the node, the proxy, the API and the clients name it through this.
const Port = 49983

// Header names.
const (
	AccessTokenHeader = "X-Access-Token"
	InitTokenHeader   = "X-Warren-Init-Token"
	// InitIDHeader carries, on GET /envs, envd's init ID: random, renewed
	// at start and at every /init (which the node calls after every
	// start and restore). A process in the sandbox that keeps state
	// across a restore (the code interpreter's kernels) compares it to
	// notice that its memory may have been copied.
	InitIDHeader = "X-Warren-Init-Id"
)

// Messages of the 401 answers.
const (
	MsgMissingToken     = "unauthorized access, please provide a valid access token or method signing if supported"
	MsgSignatureExpired = "signature is already expired"
	MsgSignatureInvalid = "invalid signature"
)

// Operations a signature can grant.
const (
	OpRead  = "read"
	OpWrite = "write"
)

// Sign computes the signature of a /files URL as the E2B SDKs do:
// "v1_" + unpadded base64 of sha256("path:op:user:token[:expiration]").
// expiration 0 means none.
func Sign(path, op, username, token string, expiration int64) string {
	s := path + ":" + op + ":" + username + ":" + token
	if expiration != 0 {
		s += ":" + strconv.FormatInt(expiration, 10)
	}
	sum := sha256.Sum256([]byte(s))
	return "v1_" + base64.RawStdEncoding.EncodeToString(sum[:])
}

// Signed are the signature parameters of a /files URL: what the signature
// binds (path, username, expiration) and the signature itself.
type Signed struct {
	Path, Username, Signature string
	// Expiration is the Unix time the URL expires at; 0 means never.
	Expiration int64
}

// signedParams are the query parameters a signature binds or carries.
var signedParams = []string{"path", "username", "signature", "signature_expiration"}

// ParseSigned reads the signature parameters of a /files query. ok is false
// when it carries no signature. A parameter given more than once is an
// error (of errdefs.ErrUnauthorized, its message for the client), as is an expiration that is not a Unix time: parsers that pick
// different copies (the first here, the last in another proxy) would
// check one path and serve another.
func ParseSigned(q url.Values) (s Signed, ok bool, err error) {
	if q.Get("signature") == "" {
		return Signed{}, false, nil
	}
	for _, k := range signedParams {
		if len(q[k]) > 1 {
			return Signed{}, true, errdefs.Publicf(errdefs.ErrUnauthorized, "%s: parameter %q is given %d times", MsgSignatureInvalid, k, len(q[k]))
		}
	}
	s = Signed{Path: q.Get("path"), Username: q.Get("username"), Signature: q.Get("signature")}
	if e := q.Get("signature_expiration"); e != "" {
		if s.Expiration, err = strconv.ParseInt(e, 10, 64); err != nil || s.Expiration == 0 {
			return Signed{}, true, errdefs.Publicf(errdefs.ErrUnauthorized, "%s: signature_expiration %q is not a Unix time", MsgSignatureInvalid, e)
		}
	}
	return s, true, nil
}

// Expired reports whether s has an expiration before now (Unix seconds).
func (s Signed) Expired(now int64) bool { return s.Expiration != 0 && now > s.Expiration }

// Valid reports, in constant time, whether s is signed for op with token.
// An empty token never signs anything.
func (s Signed) Valid(op, token string) bool {
	if token == "" {
		return false
	}
	want := Sign(s.Path, op, s.Username, token, s.Expiration)
	return subtle.ConstantTimeCompare([]byte(s.Signature), []byte(want)) == 1
}

// FilesOp is the operation an HTTP method performs on /files: read for GET
// and HEAD, write for anything else.
func FilesOp(method string) string {
	if method == http.MethodGet || method == http.MethodHead {
		return OpRead
	}
	return OpWrite
}
