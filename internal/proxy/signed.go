package proxy

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"sync"
	"time"

	"github.com/warren-sandbox/warren/internal/envdproto"
	"github.com/warren-sandbox/warren/internal/errdefs/errhttp"
	"github.com/warren-sandbox/warren/internal/throttle"
)

// SignatureFinder is implemented by routers that find the sandbox a signed
// /files URL was signed for (lifecycle.Manager). With it the proxy serves
// the SDK's signed URLs (uploadUrl, downloadUrl) in plain-http mode, where
// they name no sandbox: the sandbox is the one whose envd access token
// makes the signature valid (docs/api.md, "Sandbox traffic (edge proxy)").
// valid is called once per candidate sandbox, so a lookup costs one hash
// per running sandbox; the proxy bounds how often each client makes one.
type SignatureFinder interface {
	SandboxBySignature(ctx context.Context, valid func(token string) bool) (string, error)
}

// Defaults of the signed-URL lookup budget (Config.SignedLookupBurst,
// SignedLookupEvery): 60 at once, then 10 a second, per client address.
const (
	DefaultSignedLookupBurst = 60
	DefaultSignedLookupEvery = 100 * time.Millisecond
)

// signedFiles reports whether r is a signed /files request without
// routing headers.
func signedFiles(r *http.Request) bool {
	return r.URL.Path == "/files" && r.Header.Get(HeaderSandboxID) == "" && r.URL.Query().Get("signature") != ""
}

// sandboxBySignature finds the sandbox a signed /files request without a
// sandbox ID is for, or answers the request itself (ok false). Before any
// lookup, a malformed or expired signature is refused, and a signature
// found before is routed from memory; a lookup spends one of the client's
// budget (429 when none is left).
func (p *Proxy) sandboxBySignature(w http.ResponseWriter, r *http.Request) (id string, ok bool) {
	s, _, err := envdproto.ParseSigned(r.URL.Query())
	if err != nil {
		writeJSONError(w, r, http.StatusUnauthorized, errBody{Message: errhttp.Message(err), Code: 401})
		return "", false
	}
	if s.Expired(time.Now().Unix()) {
		writeJSONError(w, r, http.StatusUnauthorized, errBody{Message: envdproto.MsgSignatureExpired, Code: 401})
		return "", false
	}
	op := envdproto.FilesOp(r.Method)
	if id := p.signed.get(op, s.Signature); id != "" {
		return id, true // envd (or admit, for a paused sandbox) checks it again
	}
	f, found := p.cfg.Router.(SignatureFinder)
	if !found {
		writeJSONError(w, r, http.StatusUnauthorized, errBody{Message: envdproto.MsgSignatureInvalid, Code: 401})
		return "", false
	}
	client := throttle.Client(r, p.cfg.TrustedProxies)
	if allowed, retry := p.lookups.Take(client); !allowed {
		secs := int(math.Ceil(retry.Seconds()))
		p.log.Debug("proxy signed url lookups throttled", "client", client, "retry_after_s", secs)
		w.Header().Set("Retry-After", fmt.Sprint(secs))
		writeJSONError(w, r, http.StatusTooManyRequests, errBody{Code: 429,
			Message: fmt.Sprintf("too many signed URLs without a sandbox ID from this address: retry in %d s, or reach the sandbox by its <port>-<sandboxID> host or the %s header", secs, HeaderSandboxID)})
		return "", false
	}
	id, err = f.SandboxBySignature(r.Context(), func(tok string) bool { return s.Valid(op, tok) })
	if err != nil {
		p.log.Warn("proxy signed url", "error", err)
		writeJSONError(w, r, http.StatusBadGateway, errBody{Message: "The sandbox could not be reached", Code: 502})
		return "", false
	}
	if id == "" {
		writeJSONError(w, r, http.StatusUnauthorized, errBody{Message: envdproto.MsgSignatureInvalid, Code: 401})
		return "", false
	}
	p.signed.put(op, s.Signature, id)
	return id, true
}

// signedCache remembers, for a while, which sandbox a signature was found
// for (by operation and signature), so that a signed URL used again (a download link) costs no lookup.
// Only signatures a lookup verified are kept; what is routed from here is
// verified again by envd, or by admit for a paused sandbox.
type signedCache struct {
	mu  sync.Mutex
	ttl time.Duration
	max int
	m   map[string]signedEntry
}

type signedEntry struct {
	id string
	at time.Time
}

func newSignedCache() *signedCache {
	return &signedCache{ttl: 10 * time.Minute, max: 4096, m: map[string]signedEntry{}}
}

func (c *signedCache) get(op, sig string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := op + " " + sig
	e, ok := c.m[k]
	if !ok {
		return ""
	}
	if time.Since(e.at) > c.ttl {
		delete(c.m, k)
		return ""
	}
	return e.id
}

func (c *signedCache) put(op, sig, id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= c.max {
		for k := range c.m { // any one: the map's order is random
			delete(c.m, k)
			break
		}
	}
	c.m[op+" "+sig] = signedEntry{id: id, at: time.Now()}
}
