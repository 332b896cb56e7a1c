// Package auth decides who may call envd and as which user: the access
// token (X-Access-Token), signed /files URLs, the node's /init token, and
// the user named by Basic auth.
package auth

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/warren-sandbox/warren/internal/envd/identity"
	"github.com/warren-sandbox/warren/internal/envd/state"
	"github.com/warren-sandbox/warren/internal/envdproto"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/errdefs/errhttp"
)

// Header names and the messages of the 401 answers (see envdproto, their
// one source, shared with the proxy).
const (
	AccessTokenHeader   = envdproto.AccessTokenHeader
	InitTokenHeader     = envdproto.InitTokenHeader
	MsgMissingToken     = envdproto.MsgMissingToken
	MsgSignatureExpired = envdproto.MsgSignatureExpired
	MsgSignatureInvalid = envdproto.MsgSignatureInvalid
)

// Auth checks requests against the runtime state.
type Auth struct {
	state *state.State
	now   func() time.Time
}

// New returns an Auth reading the access token from st.
func New(st *state.State) *Auth { return &Auth{state: st, now: time.Now} }

// exempt lists the routes that check their own credentials or need none.
func exempt(r *http.Request) bool {
	switch r.URL.Path {
	case "/health", "/files", "/init":
		return true
	}
	return false
}

// Middleware rejects requests without the access token when one is set,
// except on /health, /files (token or signature, checked there) and /init
// (node token, checked there).
func (a *Auth) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !exempt(r) && a.state.HasToken() && !a.state.TokenMatches(r.Header.Get(AccessTokenHeader)) {
			WriteError(w, http.StatusUnauthorized, MsgMissingToken)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// HasValidToken reports whether r carries the access token, or no token is
// set at all.
func (a *Auth) HasValidToken(r *http.Request) bool {
	return !a.state.HasToken() || a.state.TokenMatches(r.Header.Get(AccessTokenHeader))
}

// Operations a signature can grant.
const (
	OpRead  = envdproto.OpRead
	OpWrite = envdproto.OpWrite
)

// Sign computes the signature of a /files URL (envdproto.Sign).
func Sign(path, op, username, token string, expiration int64) string {
	return envdproto.Sign(path, op, username, token, expiration)
}

// Grant is what an authorised /files request may do.
type Grant struct {
	// Signed is set when a signed URL authorised the request (not the
	// access token, and a token is set): it may then act only on Path,
	// the path it was signed for ("" when it names none), as Username.
	Signed bool
	Path   string
}

// Files authorises a /files request for op: the access token, or a
// valid, unexpired signature over the raw path, username and expiration
// query values (each given at most once). It returns what the request may
// do, or the message of the 401 answer.
func (a *Auth) Files(r *http.Request, op string) (Grant, string) {
	if a.HasValidToken(r) {
		return Grant{}, ""
	}
	s, ok, err := envdproto.ParseSigned(r.URL.Query())
	switch {
	case !ok:
		return Grant{}, MsgMissingToken
	case err != nil:
		return Grant{}, errhttp.Message(err)
	case s.Expired(a.now().Unix()):
		return Grant{}, MsgSignatureExpired
	case !s.Valid(op, a.state.Token()):
		return Grant{}, MsgSignatureInvalid
	}
	return Grant{Signed: true, Path: s.Path}, ""
}

// BasicUser returns the user name of a Basic Authorization header ("" when
// there is none).
func BasicUser(h http.Header) string {
	r := http.Request{Header: h}
	name, _, ok := r.BasicAuth()
	if !ok {
		return ""
	}
	return name
}

// User resolves the user a request acts as: name when given, else the
// default user. An unknown user is an unauthorized error.
func (a *Auth) User(name string) (*identity.User, error) {
	if name == "" {
		name = a.state.DefaultUserName()
	}
	u, err := identity.Lookup(name)
	if err != nil {
		return nil, errdefs.Classf(errdefs.ErrUnauthorized, "invalid username: '%s'", name)
	}
	return u, nil
}

// InitGate decides whether a caller may call /init.
type InitGate struct {
	hash []byte // sha256 of the node's init token; nil when not configured
	st   *state.State
}

// NewInitGate returns a gate. tokenSHA256Hex is the hex sha256 of the
// token the node sends in X-Warren-Init-Token; empty means the upstream
// rule: /init is open until an access token is set and then requires it.
func NewInitGate(tokenSHA256Hex string, st *state.State) (*InitGate, error) {
	g := &InitGate{st: st}
	if tokenSHA256Hex != "" {
		h, err := hex.DecodeString(strings.ToLower(tokenSHA256Hex))
		if err != nil || len(h) != sha256.Size {
			return nil, fmt.Errorf("init token sha256 %q: want 64 hex digits: %w", tokenSHA256Hex, errdefs.ErrInvalid)
		}
		g.hash = h
	}
	return g, nil
}

// Allowed reports whether r may call /init.
func (g *InitGate) Allowed(r *http.Request) bool {
	if g.hash != nil {
		got := r.Header.Get(InitTokenHeader)
		if got == "" {
			return false
		}
		sum := sha256.Sum256([]byte(got))
		return subtle.ConstantTimeCompare(sum[:], g.hash) == 1
	}
	if !g.st.HasToken() {
		return true
	}
	return g.st.TokenMatches(r.Header.Get(AccessTokenHeader))
}

// WriteError writes the JSON error body of envd's HTTP routes,
// {"code":<status>,"message":"..."} (errhttp.Body, the API's) on a line:
// status and msg are the caller's, errhttp.Status for an error of a
// class.
func WriteError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(errhttp.Body{Code: status, Message: msg}) // a line, as envd always wrote it
}
