package noderole

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/nodeauth"
)

// checkIdentity refuses a node that would take calls it cannot tell
// apart, or carry credentials in clear: a node needs its own token (or
// InsecureLoopback, both listeners on loopback) and serves TLS unless
// both listeners are on loopback.
func (c *Config) checkIdentity() error {
	onLoopback := nodeauth.LoopbackAddr(c.RPCListen) && nodeauth.LoopbackAddr(c.ProxyListen)
	switch {
	case c.NodeToken == "" && !c.InsecureLoopback:
		return fmt.Errorf("node token: --node-token (or WARREN_NODE_TOKEN) is required: issue this node's own with `warren node token create %s` (or run with --insecure-loopback, both listeners on loopback): %w", c.NodeID, errdefs.ErrInvalid)
	case c.NodeToken == "" && !onLoopback:
		return fmt.Errorf("node token: --insecure-loopback needs --rpc-listen and --proxy-listen on loopback: %w", errdefs.ErrInvalid)
	case c.NodeToken != "" && !nodeauth.ValidToken(c.NodeToken):
		return fmt.Errorf("node token: not a node token (wnt_…, from `warren node token create`): %w", errdefs.ErrInvalid)
	case (c.TLSCert == "") != (c.TLSKey == ""):
		return fmt.Errorf("tls: give both --tls-cert and --tls-key: %w", errdefs.ErrInvalid)
	case c.TLSCert == "" && !onLoopback:
		return fmt.Errorf("tls: --tls-cert and --tls-key are required unless --rpc-listen and --proxy-listen are on loopback (credentials do not cross a network in clear): %w", errdefs.ErrInvalid)
	}
	if c.APIURL != "" {
		u, err := url.Parse(c.APIURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("api url %q: want http(s)://HOST[:PORT]: %w", c.APIURL, errdefs.ErrInvalid)
		}
	}
	return nil
}

// nodeHops are a node's side of the hops to the control plane and its
// peers: the credentials it takes (derived from its token), the TLS it
// serves, and the clients of its own calls.
type nodeHops struct {
	// rpc is what the control plane presents on the RPC listener
	// (NodeService, the build routes); metrics what GET /metrics takes
	// besides; proxy what edge proxies present on the proxy listener;
	// pull the key of the grants peers present for artifacts.
	rpc, metrics, proxy, pull string
	// server is the listeners' TLS (nil: plain HTTP, on loopback).
	server *tls.Config
	// peers carries the pulls from other nodes, api the heartbeats and
	// questions to the control plane: no environment proxy, no redirects.
	peers, api *http.Client
}

func (c *Config) nodeHops(log *slog.Logger) (*nodeHops, error) {
	h := &nodeHops{
		rpc: nodeauth.Credential(c.NodeToken, nodeauth.PurposeRPC), metrics: nodeauth.Credential(c.NodeToken, nodeauth.PurposeMetrics),
		proxy: nodeauth.Credential(c.NodeToken, nodeauth.PurposeProxy), pull: nodeauth.Credential(c.NodeToken, nodeauth.PurposePull),
	}
	if c.TLSCert != "" {
		srv, err := nodeauth.ServerTLS(c.TLSCert, c.TLSKey)
		if err != nil {
			return nil, err
		}
		h.server = srv
	}
	peerTLS, err := nodeauth.ClientTLS(c.NodeCA)
	if err != nil {
		return nil, fmt.Errorf("--node-ca: %w", err)
	}
	apiTLS, err := nodeauth.ClientTLS(c.APICA)
	if err != nil {
		return nil, fmt.Errorf("--api-ca: %w", err)
	}
	h.peers, h.api = nodeauth.Client(peerTLS), nodeauth.Client(apiTLS)
	if u, _ := url.Parse(c.APIURL); c.NodeToken != "" && u != nil && u.Scheme == "http" && !nodeauth.Loopback(u.Hostname()) {
		log.Warn("the control plane's URL is plain http off loopback: this node's token crosses the network in clear (give warren api --tls-cert, or keep the network private)",
			"api_url", c.APIURL)
	}
	return h, nil
}

// apiWithTimeout is the api client with the heartbeat's timeout.
func (h *nodeHops) apiWithTimeout() *http.Client {
	c := *h.api
	c.Timeout = 10 * time.Second
	return &c
}
