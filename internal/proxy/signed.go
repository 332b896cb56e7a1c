package proxy

import (
	"context"
	"crypto/subtle"
	"net/http"
	"strconv"

	"github.com/warren-sandbox/warren/internal/envdproto"
)

// TokenLister is implemented by routers that can list the envd access
// tokens of running sandboxes (lifecycle.Manager). With it the proxy
// serves the SDK's signed /files URLs (uploadUrl, downloadUrl), which in
// plain-http mode name no sandbox: the sandbox is the one whose token makes
// the signature valid (docs/api.md, "Sandbox traffic (edge proxy)").
type TokenLister interface {
	EnvdTokens(ctx context.Context) (map[string]string, error)
}

// signedFiles reports whether r is a signed /files request without
// routing headers.
func signedFiles(r *http.Request) bool {
	return r.URL.Path == "/files" && r.Header.Get(HeaderSandboxID) == "" && r.URL.Query().Get("signature") != ""
}

// sandboxBySignature finds the sandbox whose envd token signs r, or "".
func (p *Proxy) sandboxBySignature(r *http.Request) (string, error) {
	tl, ok := p.cfg.Router.(TokenLister)
	if !ok {
		return "", nil
	}
	tokens, err := tl.EnvdTokens(r.Context())
	if err != nil {
		return "", err
	}
	q := r.URL.Query()
	op := envdproto.OpRead
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		op = envdproto.OpWrite
	}
	var exp int64
	if e := q.Get("signature_expiration"); e != "" {
		if exp, err = strconv.ParseInt(e, 10, 64); err != nil {
			return "", nil
		}
	}
	sig := []byte(q.Get("signature"))
	for id, tok := range tokens {
		want := envdproto.Sign(q.Get("path"), op, q.Get("username"), tok, exp)
		if subtle.ConstantTimeCompare(sig, []byte(want)) == 1 {
			return id, nil
		}
	}
	return "", nil
}
