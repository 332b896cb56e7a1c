// Package proxy is Warren's edge proxy: it carries sandbox traffic (the
// SDK's envd calls and the user's own ports) from outside to the sandbox.
//
// A request is routed (docs/api.md, "Sandbox traffic (edge proxy)")
//   - by its E2b-Sandbox-Id and E2b-Sandbox-Port headers when its Host is
//     localhost, an IP literal or sandbox.<domain>;
//   - otherwise by a Host of the form <port>-<sandboxID>.<domain>.
//
// Streaming responses are flushed as they come, WebSocket upgrades pass
// through, and HTTP/2 works when the listener offers it over TLS. Missing
// sandboxes answer 502 with E2B's JSON body (an HTML page for browsers), a
// closed port a "port is not open" 502, a paused sandbox a 502 "paused"
// body with canAutoResume (the SDK reads 502 as "not running"), and a
// sandbox secured with a traffic access token a 403 without it.
// Credentials are checked before a paused sandbox is woken (admit.go),
// and the request that wakes one is held until its port answers
// (wake.go). Browser preflights of envd traffic are answered here (package
// cors). A sandbox's network.maskRequestHost replaces the Host its own
// ports see, and its network.httpsPorts are spoken to over TLS. envd's
// internal routes (/init) are not reachable.
//
// A sandbox on another node (Route.NodeProxy) is reached through that
// node's proxy listener (NodeProxy, nodeproxy.go), which takes the sandbox
// ID and port from headers, checks the node's proxy credential and forwards to that
// sandbox's own address only.
package proxy

import (
	"cmp"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/warren-sandbox/warren/internal/cors"
	"github.com/warren-sandbox/warren/internal/envdproto"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/errdefs/errhttp"
	"github.com/warren-sandbox/warren/internal/route"
	"github.com/warren-sandbox/warren/internal/sandbox"
	"github.com/warren-sandbox/warren/internal/throttle"
)

// sandboxTLS is how the proxy speaks TLS to a sandbox's httpsPorts: the
// server in the sandbox has a certificate of its own making, and the hop
// stays on the node, so it is not verified.
var sandboxTLS = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // node-local hop to a tenant's own server

// Header names.
const (
	HeaderSandboxID    = "E2b-Sandbox-Id"
	HeaderSandboxPort  = "E2b-Sandbox-Port"
	HeaderTrafficToken = "E2b-Traffic-Access-Token"
)

// EnvdPort is envd's port inside every sandbox.
const EnvdPort = envdproto.Port

// internalRoutes are envd paths only the node may call.
var internalRoutes = []string{"/init"}

// Config configures a Proxy. Router is required.
type Config struct {
	Router route.Router
	// Domain is the sandbox domain: hosts <port>-<id>.<Domain> are routed
	// (a port inside it is ignored for matching).
	Domain string
	Logger *slog.Logger
	// DialTimeout bounds connecting to a sandbox port (default 10 s).
	DialTimeout time.Duration
	// WakeTimeout bounds how long a request that woke a paused sandbox
	// waits for its port to answer before it is a 502 (default 30 s).
	WakeTimeout time.Duration
	// NodeHop tells how to reach the proxy listener of node nodeID
	// (Route.NodeProxy, Route.NodeID): the credential it takes in
	// HeaderNodeToken, that node's own (nodereg.Credentials with
	// nodeauth.PurposeProxy), so that no node's traffic credential opens
	// another's, and whether it serves TLS. Nil: plain HTTP, no
	// credential (loopback nodes without tokens). An error fails the
	// request (502).
	NodeHop func(ctx context.Context, nodeID string) (NodeHop, error)
	// NodeTLS verifies the node proxy listeners' certificates (nil: the
	// system's roots).
	NodeTLS *tls.Config
	// SignedLookupBurst and SignedLookupEvery are each client address's
	// budget of signed /files requests without a sandbox ID that need a
	// lookup (signed.go): Burst at once, then one per Every (defaults
	// DefaultSignedLookupBurst, DefaultSignedLookupEvery).
	SignedLookupBurst int
	SignedLookupEvery time.Duration
	// TrustedProxies are reverse proxies in front of this one: a request
	// from them is the client's that their X-Forwarded-For names, for the
	// budget above (package throttle).
	TrustedProxies []netip.Prefix
}

// NodeHop is how the edge proxy reaches one node's proxy listener.
type NodeHop struct {
	Credential string
	TLS        bool
}

// Proxy is the edge proxy. It is an http.Handler.
type Proxy struct {
	cfg    Config
	domain string // Domain without port, lowercase
	log    *slog.Logger
	rp     *httputil.ReverseProxy
	tr     *http.Transport
	// wake carries requests that woke their sandbox (wake.go).
	wake *httputil.ReverseProxy
	// epochs drops pooled connections to a sandbox seen in a new epoch.
	epochs *epochWatch
	// signed and lookups serve signed URLs without a sandbox ID.
	signed  *signedCache
	lookups *throttle.Limiter
}

var _ http.Handler = (*Proxy)(nil)

type routeKey struct{}

type target struct {
	id   string
	port int
	addr string
	// wakeBy, when set, is until when dials that are refused or reset are
	// retried: the sandbox was just woken.
	wakeBy time.Time
	// host replaces the request's Host when set (maskRequestHost); tls
	// speaks TLS to the port (httpsPorts).
	host string
	tls  bool
	// viaNode is set when addr is the proxy listener of the sandbox's node
	// (nodeproxy.go), not the sandbox: the request names the sandbox and
	// port in headers, and the node speaks TLS to the port when tls is set.
	viaNode bool
	// relayed is set on a node proxy: the request came from an edge proxy,
	// whose X-Forwarded-* headers are kept.
	relayed bool
	// hop is how the node proxy at addr is reached (viaNode).
	hop NodeHop
}

// New returns a Proxy.
func New(cfg Config) (*Proxy, error) {
	if cfg.Router == nil {
		return nil, fmt.Errorf("proxy: router is required: %w", errdefs.ErrInvalid)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 10 * time.Second
	}
	if cfg.WakeTimeout <= 0 {
		cfg.WakeTimeout = 30 * time.Second
	}
	if cfg.SignedLookupBurst <= 0 {
		cfg.SignedLookupBurst = DefaultSignedLookupBurst
	}
	if cfg.SignedLookupEvery <= 0 {
		cfg.SignedLookupEvery = DefaultSignedLookupEvery
	}
	p := &Proxy{cfg: cfg, log: cfg.Logger, signed: newSignedCache(),
		lookups: throttle.New(throttle.Config{Burst: cfg.SignedLookupBurst, Every: cfg.SignedLookupEvery})}
	p.domain = strings.ToLower(cfg.Domain)
	if h, _, err := net.SplitHostPort(p.domain); err == nil {
		p.domain = h
	}
	dialer := &net.Dialer{Timeout: cfg.DialTimeout, KeepAlive: 30 * time.Second}
	tr := &http.Transport{
		DialContext:           dialer.DialContext,
		DialTLSContext:        p.dialTLS(dialer.DialContext),
		MaxIdleConnsPerHost:   64,
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: 0, // long-running streams
		ExpectContinueTimeout: time.Second,
	}
	p.tr = tr
	p.epochs = newEpochWatch(tr)
	p.rp = p.reverseProxy(tr)
	p.wake = p.reverseProxy(p.newWakeTransport())
	return p, nil
}

func (p *Proxy) reverseProxy(tr http.RoundTripper) *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			t := pr.In.Context().Value(routeKey{}).(*target)
			scheme := "http"
			if t.tls && !t.viaNode || t.viaNode && t.hop.TLS {
				scheme = "https"
			}
			pr.SetURL(&url.URL{Scheme: scheme, Host: t.addr})
			pr.Out.Host = cmp.Or(t.host, pr.In.Host)
			// Only this proxy says which node hop a request takes: what a
			// client sent under those names goes nowhere.
			for _, h := range nodeHeaders {
				pr.Out.Header.Del(h)
			}
			if t.viaNode {
				p.toNode(pr.Out, t)
			}
			if t.relayed {
				for _, h := range []string{"X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto"} {
					if v := pr.In.Header.Values(h); len(v) > 0 {
						pr.Out.Header[h] = v
					}
				}
			} else {
				pr.SetXForwarded()
			}
			if pr.Out.Body != nil && pr.Out.ContentLength > 0 {
				pr.Out.Body = &declaredBody{rc: pr.Out.Body, left: pr.Out.ContentLength}
			}
		},
		Transport:     tr,
		FlushInterval: -1, // flush every write: Connect streams, SSE
		ErrorHandler:  p.backendError,
	}
}

// dialTLS is the TLS dial of the proxy's transports: to a node proxy
// listener (viaNode) with NodeTLS, its certificate verified for its host;
// to a sandbox's httpsPorts with sandboxTLS.
func (p *Proxy) dialTLS(dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		cfg := sandboxTLS
		if t, _ := ctx.Value(routeKey{}).(*target); t == nil || t.viaNode {
			cfg = &tls.Config{MinVersion: tls.VersionTLS12}
			if p.cfg.NodeTLS != nil {
				cfg = p.cfg.NodeTLS.Clone()
			}
			if cfg.ServerName == "" {
				cfg.ServerName, _, _ = net.SplitHostPort(addr)
			}
			cfg.NextProtos = []string{"http/1.1"} // upgrades (WebSocket) need HTTP/1.1
		}
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		tc := tls.Client(c, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			c.Close()
			return nil, err
		}
		return tc, nil
	}
}

// Match reports whether r is sandbox traffic: it carries the routing
// headers on a shared host, or its Host names a sandbox port. In plain-http
// mode one listener serves the API and sandbox traffic, dispatching on
// Match.
func (p *Proxy) Match(r *http.Request) bool {
	_, _, ok, _ := p.parse(r)
	return ok
}

// parse extracts the sandbox ID and port of r. ok is false when r is not
// sandbox traffic; err is set when it is but is malformed.
func (p *Proxy) parse(r *http.Request) (id string, port int, ok bool, err error) {
	host := strings.ToLower(r.Host)
	if h, _, e := net.SplitHostPort(host); e == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.Trim(host, "[]"), ".")
	shared := host == "localhost" || net.ParseIP(host) != nil || (p.domain != "" && host == "sandbox."+p.domain)
	if shared {
		id = r.Header.Get(HeaderSandboxID)
		if id == "" {
			if signedFiles(r) {
				return "", EnvdPort, true, nil // the sandbox is found by its signature
			}
			return "", 0, false, nil
		}
		ps := r.Header.Get(HeaderSandboxPort)
		if ps == "" {
			return id, 0, true, errdefs.Publicf(errdefs.ErrInvalid, "header %s is missing", HeaderSandboxPort)
		}
		port, err = strconv.Atoi(ps)
		if err != nil || port < 1 || port > 65535 {
			return id, 0, true, errdefs.Publicf(errdefs.ErrInvalid, "header %s: %q is not a port", HeaderSandboxPort, ps)
		}
		return id, port, true, nil
	}
	if p.domain == "" || !strings.HasSuffix(host, "."+p.domain) {
		return "", 0, false, nil
	}
	label := strings.TrimSuffix(host, "."+p.domain)
	if strings.Contains(label, ".") {
		return "", 0, false, nil
	}
	ps, rest, found := strings.Cut(label, "-")
	if !found {
		return "", 0, false, nil
	}
	port, err = strconv.Atoi(ps)
	if err != nil || port < 1 || port > 65535 || !sandbox.ValidID(rest) {
		return "", 0, false, nil
	}
	return rest, port, true, nil
}

// ServeHTTP implements http.Handler.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id, port, ok, err := p.parse(r)
	if !ok {
		writeJSONError(w, r, http.StatusBadRequest, errBody{Message: "not sandbox traffic: no " + HeaderSandboxID + " header and the host is not <port>-<sandboxID>." + p.domain, Code: 400})
		return
	}
	if err != nil {
		writeJSONError(w, r, http.StatusBadRequest, errBody{SandboxID: id, Message: errhttp.Message(err), Code: 400})
		return
	}
	if port == EnvdPort && cors.IsPreflight(r) {
		// envd's policy, answered here: a preflight carries no token and
		// must not wake a paused sandbox (nor cost a signature lookup).
		cors.Preflight(w, r)
		return
	}
	if id == "" {
		if id, ok = p.sandboxBySignature(w, r); !ok {
			return
		}
	}
	if port == EnvdPort {
		for _, ir := range internalRoutes {
			if r.URL.Path == ir || strings.HasPrefix(r.URL.Path, ir+"/") {
				writeJSONError(w, r, http.StatusNotFound, errBody{Message: "This endpoint is internal to the sandbox and is not reachable through the sandbox URL", Path: r.URL.Path, Code: 404})
				return
			}
		}
	}
	route, err := p.cfg.Router.Route(r.Context(), id, func(a *route.Admission) error { return admit(r, port, a) })
	if err != nil {
		p.routeError(w, r, id, err)
		return
	}
	t := &target{id: id, port: port, addr: net.JoinHostPort(route.Host, strconv.Itoa(port))}
	if port == EnvdPort && route.Address != "" {
		t.addr = route.Address
	}
	if port != EnvdPort {
		if route.MaskRequestHost != "" {
			t.host = strings.ReplaceAll(route.MaskRequestHost, "${PORT}", strconv.Itoa(port))
		}
		t.tls = slices.Contains(route.HTTPSPorts, port)
	}
	if route.NodeProxy != "" {
		// The sandbox is on another node: only its proxy reaches it, with
		// that node's own credential.
		t.addr, t.viaNode = route.NodeProxy, true
		if p.cfg.NodeHop != nil {
			if t.hop, err = p.cfg.NodeHop(r.Context(), route.NodeID); err != nil {
				p.log.Warn("proxy: no credential for the sandbox's node", "sandbox_id", id, "node_id", route.NodeID, "error", err)
				writeJSONError(w, r, http.StatusBadGateway, errBody{SandboxID: id, Message: "The sandbox could not be reached", Code: 502})
				return
			}
		}
	}
	rp := p.rp
	if route.Woken {
		t.wakeBy = time.Now().Add(p.cfg.WakeTimeout)
		rp = p.wake
		// Connections pooled before the pause lead nowhere now.
		p.tr.CloseIdleConnections()
	} else if !t.viaNode {
		// A node proxy watches its own sandboxes' epochs.
		p.epochs.observe(id, route.Epoch)
	}
	rp.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), routeKey{}, t)))
}

func (p *Proxy) routeError(w http.ResponseWriter, r *http.Request, id string, err error) {
	var d *denied
	switch {
	case errors.As(err, &d):
		writeJSONError(w, r, d.status, d.body)
	case errors.Is(err, route.ErrPaused):
		writeJSONError(w, r, http.StatusBadGateway, pausedBody(id, false))
	case errors.Is(err, errdefs.ErrExhausted):
		// Waking it would take a concurrency slot the team does not have
		// (lifecycle.LimitError) or room no node has: it stays paused, as
		// a resume through the API would (429).
		w.Header().Set("Retry-After", "5")
		writeJSONError(w, r, http.StatusTooManyRequests, errBody{SandboxID: id, Message: errhttp.Message(err), Code: 429})
	case errdefs.IsNotFound(err), errdefs.IsUnavailable(err):
		writeJSONError(w, r, http.StatusBadGateway, errBody{SandboxID: id, Message: "The sandbox was not found", Code: 502})
	default:
		p.log.Warn("proxy route", "sandbox_id", id, "error", err)
		writeJSONError(w, r, http.StatusBadGateway, errBody{SandboxID: id, Message: "The sandbox could not be reached", Code: 502})
	}
}

// backendError answers a failed round trip to the sandbox.
func (p *Proxy) backendError(w http.ResponseWriter, r *http.Request, err error) {
	t := r.Context().Value(routeKey{}).(*target)
	if errors.Is(err, context.Canceled) {
		return // the client went away
	}
	if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) {
		writeJSONError(w, r, http.StatusBadGateway, errBody{SandboxID: t.id, Message: "The sandbox is running but port is not open", Port: strconv.Itoa(t.port), Code: 502})
		return
	}
	p.log.Debug("proxy backend", "sandbox_id", t.id, "port", t.port, "error", err)
	writeJSONError(w, r, http.StatusBadGateway, errBody{SandboxID: t.id, Message: "The sandbox could not be reached", Port: strconv.Itoa(t.port), Code: 502})
}

// errBody is the proxy's error JSON. Field order is the wire order.
type errBody struct {
	SandboxID     string `json:"sandboxId,omitempty"`
	Message       string `json:"message"`
	Port          string `json:"port,omitempty"`
	Path          string `json:"path,omitempty"`
	Code          int    `json:"code"`
	CanAutoResume *bool  `json:"canAutoResume,omitempty"`
}

var page = template.Must(template.New("error").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>{{.Title}}</title>
<style>body{font-family:system-ui,sans-serif;max-width:40rem;margin:4rem auto;padding:0 1rem;color:#222}code{background:#eee;padding:0 .2rem}</style>
</head><body><h1>{{.Title}}</h1><p>{{.Message}}</p>{{if .SandboxID}}<p>Sandbox <code>{{.SandboxID}}</code>{{if .Port}}, port <code>{{.Port}}</code>{{end}}</p>{{end}}
<p><small>Warren edge proxy</small></p></body></html>
`))

// wantsHTML reports whether the client is a browser asking for a page.
func wantsHTML(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept"), "text/html")
}

func writeJSONError(w http.ResponseWriter, r *http.Request, status int, b errBody) {
	if wantsHTML(r) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.WriteHeader(status)
		page.Execute(w, struct {
			Title string
			errBody
		}{http.StatusText(status), b})
		return
	}
	data, _ := json.Marshal(b)
	cors.Allow(w.Header(), r) // browsers read the SDK's 502s too
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(data)
}

// declaredBody is the outbound copy of an inbound body with a declared
// length: it ends at that length without reading the inbound body again.
//
// http.Transport, having copied ContentLength bytes, reads the body once
// more to check that it is not longer. For an HTTP/1 inbound request that
// read can come after the sandbox has answered and the proxy has written
// the response headers, and by then net/http's server has drained and
// closed the inbound body (see http.ResponseWriter): the read fails with
// ErrBodyReadAfterClose, the transport's write loop closes the connection
// to the sandbox, and the response being streamed back is cut ("use of
// closed network connection"; the SDK sees "terminated"). The server has
// already bounded the inbound body to its Content-Length, so stopping
// here loses nothing.
type declaredBody struct {
	rc   io.ReadCloser
	left int64
}

func (b *declaredBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	if err == nil && b.left == 0 {
		err = io.EOF
	}
	return n, err
}

func (b *declaredBody) Close() error { return b.rc.Close() }
