package proxy

import (
	"context"
	"crypto/subtle"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/route"
	"github.com/warren-sandbox/warren/internal/sandbox"
)

// The hop from an edge proxy to the proxy listener of the node that runs
// a sandbox (`warren node --proxy-listen`). The edge proxy has routed and
// admitted the request; it names the sandbox and port in these headers and
// carries that node's own proxy credential (internal/nodeauth), over TLS
// when the nodes serve it. The node proxy looks the sandbox up on its own
// agent and forwards to that sandbox's address only: nothing in the
// request names a host.
const (
	HeaderNodeToken       = "Warren-Node-Token"
	HeaderNodeSandboxID   = "Warren-Node-Sandbox-Id"
	HeaderNodeSandboxPort = "Warren-Node-Sandbox-Port"
	// HeaderNodeSandboxTLS is "1" when the port speaks TLS (httpsPorts).
	HeaderNodeSandboxTLS = "Warren-Node-Sandbox-Tls"
	// HeaderNodeWakeBy (RFC 3339) is set when the request woke the
	// sandbox: the node holds it until then for the port to answer.
	HeaderNodeWakeBy = "Warren-Node-Wake-By"
)

// nodeHeaders are removed from every request a proxy forwards, so that
// neither a client nor the node hop's credentials reach a sandbox.
var nodeHeaders = []string{HeaderNodeToken, HeaderNodeSandboxID, HeaderNodeSandboxPort, HeaderNodeSandboxTLS, HeaderNodeWakeBy}

// toNode names t's sandbox and port to the node proxy.
func (p *Proxy) toNode(out *http.Request, t *target) {
	out.Header.Set(HeaderNodeSandboxID, t.id)
	out.Header.Set(HeaderNodeSandboxPort, strconv.Itoa(t.port))
	if t.hop.Credential != "" {
		out.Header.Set(HeaderNodeToken, t.hop.Credential)
	}
	if t.tls {
		out.Header.Set(HeaderNodeSandboxTLS, "1")
	}
	if !t.wakeBy.IsZero() {
		out.Header.Set(HeaderNodeWakeBy, t.wakeBy.UTC().Format(time.RFC3339Nano))
	}
}

// SandboxGetter is what the node proxy asks of its node: nodeapi.Service
// has it.
type SandboxGetter interface {
	Get(ctx context.Context, id string) (*nodeapi.Sandbox, error)
}

// NodeConfig configures a node proxy (NewNode). Node is required.
type NodeConfig struct {
	// Node is the agent of this node; only its sandboxes are reached.
	Node SandboxGetter
	// Token, when set, must come in HeaderNodeToken with every request
	// (401 otherwise): the node's proxy credential
	// (nodeauth.Credential(token, PurposeProxy)).
	Token  string
	Logger *slog.Logger
	// DialTimeout bounds connecting to a sandbox port (default 10 s).
	DialTimeout time.Duration
}

// NodeProxy is the node-side proxy listener's handler: it carries the
// requests edge proxies forward to this node's sandboxes (HTTP, streams,
// WebSocket upgrades) to their ports.
type NodeProxy struct {
	cfg NodeConfig
	p   *Proxy
}

var _ http.Handler = (*NodeProxy)(nil)

// NewNode returns a node proxy.
func NewNode(cfg NodeConfig) (*NodeProxy, error) {
	if cfg.Node == nil {
		return nil, fmt.Errorf("node proxy: node is required: %w", errdefs.ErrInvalid)
	}
	// The forwarding half of an edge proxy; it never routes.
	p, err := New(Config{Router: noRouter{}, Logger: cfg.Logger, DialTimeout: cfg.DialTimeout})
	if err != nil {
		return nil, err
	}
	return &NodeProxy{cfg: cfg, p: p}, nil
}

type noRouter struct{}

func (noRouter) Route(context.Context, string, func(*route.Admission) error) (*route.Route, error) {
	return nil, fmt.Errorf("node proxy: no routing: %w", errdefs.ErrUnsupported)
}

// ServeHTTP implements http.Handler.
func (n *NodeProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	got := r.Header.Get(HeaderNodeToken)
	if n.cfg.Token != "" && subtle.ConstantTimeCompare([]byte(got), []byte(n.cfg.Token)) != 1 {
		writeJSONError(w, r, http.StatusUnauthorized, errBody{Message: "missing or wrong node token", Code: 401})
		return
	}
	id, ps := r.Header.Get(HeaderNodeSandboxID), r.Header.Get(HeaderNodeSandboxPort)
	port, err := strconv.Atoi(ps)
	switch {
	case !sandbox.ValidID(id):
		writeJSONError(w, r, http.StatusBadRequest, errBody{Message: "header " + HeaderNodeSandboxID + " does not name a sandbox", Code: 400})
		return
	case err != nil || port < 1 || port > 65535:
		writeJSONError(w, r, http.StatusBadRequest, errBody{SandboxID: id, Message: fmt.Sprintf("header %s: %q is not a port", HeaderNodeSandboxPort, ps), Code: 400})
		return
	}
	if port == EnvdPort {
		for _, ir := range internalRoutes {
			if r.URL.Path == ir || strings.HasPrefix(r.URL.Path, ir+"/") {
				writeJSONError(w, r, http.StatusNotFound, errBody{Message: "This endpoint is internal to the sandbox", Path: r.URL.Path, Code: 404})
				return
			}
		}
	}
	sb, err := n.cfg.Node.Get(r.Context(), id)
	if err != nil || sb.State != sandbox.StateRunning || sb.Host == "" {
		if err != nil && !errdefs.IsNotFound(err) {
			n.p.log.Warn("node proxy lookup", "sandbox_id", id, "error", err)
		}
		writeJSONError(w, r, http.StatusBadGateway, errBody{SandboxID: id, Message: "The sandbox was not found", Code: 502})
		return
	}
	t := &target{id: id, port: port, addr: net.JoinHostPort(sb.Host, strconv.Itoa(port)), relayed: true,
		tls: r.Header.Get(HeaderNodeSandboxTLS) == "1"}
	if port == EnvdPort && sb.Address != "" {
		t.addr = sb.Address
	}
	n.p.epochs.observe(id, sb.Epoch)
	rp := n.p.rp
	if v := r.Header.Get(HeaderNodeWakeBy); v != "" {
		by, err := time.Parse(time.RFC3339Nano, v)
		if err == nil && by.After(time.Now()) {
			// Held a minute at most, whatever the edge asks.
			t.wakeBy = by
			if limit := time.Now().Add(time.Minute); by.After(limit) {
				t.wakeBy = limit
			}
			rp = n.p.wake
		}
	}
	rp.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), routeKey{}, t)))
}
