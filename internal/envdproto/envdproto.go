// Package envdproto holds what envd's callers (the node agent, the control
// plane, the proxy) share of its wire protocol without linking the envd
// daemon: its protocol version, the access token header, the 401 messages
// and the signature of /files URLs.
package envdproto

import (
	"crypto/sha256"
	"encoding/base64"
	"strconv"
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
