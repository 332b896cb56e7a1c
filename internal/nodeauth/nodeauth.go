// Package nodeauth is the identity of the nodes of `warren api`
// (docs/security.md, "A node is not trusted beyond its own sandboxes"):
// each node has its own token, bound to its ID, which the operator issues
// and revokes (`warren node token create|revoke`); the credentials every
// hop between the control plane and a node carries are derived from it.
//
// A token is "wnt_<tokenID>_<mac>": mac is HMAC-SHA256 of the token ID
// and the node ID under the control plane's credential key (Issuer), so
// the control plane keeps no secret per node, only the token's record
// (its ID, node ID, and whether it is revoked). From the token:
//
//   - node → API (heartbeats, locate): the token itself, as a bearer;
//   - API → node RPC and build routes: Credential(token, PurposeRPC);
//   - edge proxy → node proxy: Credential(token, PurposeProxy);
//   - node → node artifact pulls: a Grant the control plane signs with
//     the holder's Credential(token, PurposePull), for one build and a
//     few minutes, given only to a node that needs the build;
//   - a scraper → the node's GET /metrics: Credential(token,
//     PurposeMetrics) (`warren node token credential`).
//
// A credential for one purpose is no good for another, and none of them
// tells another node's. The package holds the TLS helpers of those hops
// too (tls.go). It imports the standard library and errdefs only.
package nodeauth

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
)

// MinKeyLen is the shortest credential key accepted.
const MinKeyLen = 32

// tokenPrefix starts every node token.
const tokenPrefix = "wnt_"

// Purposes of the credentials derived from a node's token.
const (
	PurposeRPC   = "rpc"
	PurposeProxy = "proxy"
	PurposePull  = "pull"
	// PurposeMetrics is what a scraper presents for the node's GET
	// /metrics (the control plane's RPC credential opens it too).
	PurposeMetrics = "metrics"
)

// Issuer makes and checks node tokens with the control plane's key.
type Issuer struct {
	key []byte
}

// NewIssuer returns an issuer over key (at least MinKeyLen bytes).
func NewIssuer(key string) (*Issuer, error) {
	if len(key) < MinKeyLen {
		return nil, fmt.Errorf("node credential key: at least %d characters: %w", MinKeyLen, errdefs.ErrInvalid)
	}
	return &Issuer{key: []byte(key)}, nil
}

// NewTokenID returns a fresh token ID (16 hex digits).
func NewTokenID() string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return hex.EncodeToString(b[:])
}

func (i *Issuer) mac(tokenID, nodeID string) string {
	m := hmac.New(sha256.New, i.key)
	m.Write([]byte("warren node token v1\x00" + tokenID + "\x00" + nodeID))
	return hex.EncodeToString(m.Sum(nil))
}

// Token is the token tokenID of node nodeID.
func (i *Issuer) Token(tokenID, nodeID string) string {
	return tokenPrefix + tokenID + "_" + i.mac(tokenID, nodeID)
}

// Check reports whether token is the token tokenID of node nodeID.
func (i *Issuer) Check(token, tokenID, nodeID string) bool {
	return subtle.ConstantTimeCompare([]byte(token), []byte(i.Token(tokenID, nodeID))) == 1
}

// TokenID returns the ID a token names; false for what is no node token.
func TokenID(token string) (string, bool) {
	rest, ok := strings.CutPrefix(token, tokenPrefix)
	if !ok {
		return "", false
	}
	id, mac, ok := strings.Cut(rest, "_")
	if !ok || len(id) != 16 || len(mac) != 64 || !isHex(id) || !isHex(mac) {
		return "", false
	}
	return id, true
}

// ValidToken reports whether token is shaped as a node token.
func ValidToken(token string) bool {
	_, ok := TokenID(token)
	return ok
}

func isHex(s string) bool {
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// Credential derives the credential of purpose from a node's token; an
// empty token (a loopback node without one) gives "".
func Credential(token, purpose string) string {
	if token == "" {
		return ""
	}
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte("warren node credential v1\x00" + purpose))
	return hex.EncodeToString(m.Sum(nil))
}

// Bearer returns the bearer token of an Authorization header ("" without
// one).
func Bearer(h http.Header) string {
	got, _ := strings.CutPrefix(h.Get("Authorization"), "Bearer ")
	return got
}

// Equal compares two credentials in constant time; an empty want matches
// nothing.
func Equal(got, want string) bool {
	return want != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// GrantTTL is how long a pull grant is good for: the start of an
// artifact's stream, not its end, must come before.
const GrantTTL = 10 * time.Minute

// HeaderGrant carries a pull grant with an artifact request.
const HeaderGrant = "Warren-Pull-Grant"

// Grant is the control plane's leave for node requester to pull build
// buildID's artifacts from the holder whose pull credential is pullKey,
// until expires: "g1.<unix seconds>.<mac>.<requester>".
func Grant(pullKey, buildID, requester string, expires time.Time) string {
	exp := strconv.FormatInt(expires.Unix(), 10)
	return "g1." + exp + "." + grantMAC(pullKey, buildID, requester, exp) + "." + requester
}

func grantMAC(pullKey, buildID, requester, exp string) string {
	m := hmac.New(sha256.New, []byte(pullKey))
	m.Write([]byte("warren pull grant v1\x00" + buildID + "\x00" + requester + "\x00" + exp))
	return hex.EncodeToString(m.Sum(nil))
}

// CheckGrant verifies grant for build buildID with this holder's pull
// credential at now, and returns the node it was given to.
func CheckGrant(pullKey, buildID, grant string, now time.Time) (string, error) {
	bad := fmt.Errorf("pull grant for build %q: %w", buildID, errdefs.ErrUnauthorized)
	parts := strings.SplitN(grant, ".", 4)
	if pullKey == "" || len(parts) != 4 || parts[0] != "g1" {
		return "", bad
	}
	exp, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil {
		return "", bad
	}
	if !hmac.Equal([]byte(parts[2]), []byte(grantMAC(pullKey, buildID, parts[3], parts[1]))) {
		return "", bad
	}
	if now.Unix() > exp {
		return "", fmt.Errorf("pull grant for build %q expired: %w", buildID, errdefs.ErrUnauthorized)
	}
	return parts[3], nil
}
