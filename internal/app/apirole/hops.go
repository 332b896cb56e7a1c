package apirole

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"sync"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/nodeauth"
	"github.com/warren-sandbox/warren/internal/nodereg"
	"github.com/warren-sandbox/warren/internal/proxy"
	"github.com/warren-sandbox/warren/internal/store"
)

// apiHops are the control plane's side of the hops to its nodes: who a
// node is (creds), the credentials of its calls to each node, and the TLS
// it verifies them with.
type apiHops struct {
	creds *nodereg.Credentials
	tls   *tls.Config
	// uploadKey signs build context upload URLs (every replica's the
	// same: derived from the credential key).
	uploadKey string
	st        store.NodeRegistry

	mu     sync.Mutex
	scheme map[string]schemeEntry // node ID → whether its listeners are TLS
}

type schemeEntry struct {
	tls bool
	at  time.Time
}

func newAPIHops(st *store.SQL, cfg Config, log *slog.Logger) (*apiHops, error) {
	creds, err := nodereg.NewCredentials(st, cfg.NodeCredentialKey, log)
	if err != nil {
		return nil, err
	}
	tlsCfg, err := nodeauth.ClientTLS(cfg.NodeCA)
	if err != nil {
		return nil, fmt.Errorf("--node-ca: %w", err)
	}
	h := &apiHops{creds: creds, tls: tlsCfg, st: st, scheme: map[string]schemeEntry{}}
	if cfg.NodeCredentialKey != "" {
		m := hmac.New(sha256.New, []byte(cfg.NodeCredentialKey))
		m.Write([]byte("warren build upload url key v1"))
		h.uploadKey = hex.EncodeToString(m.Sum(nil))
	}
	return h, nil
}

// rpc is the credential of the calls to node nodeID's RPC listener.
func (h *apiHops) rpc(ctx context.Context, nodeID string) (string, error) {
	return h.creds.Credential(ctx, nodeID, nodeauth.PurposeRPC)
}

// proxyHop is how the edge proxy reaches node nodeID's proxy listener:
// with the node's proxy credential, over TLS when its RPC address is
// https (a node serves both listeners alike).
func (h *apiHops) proxyHop(ctx context.Context, nodeID string) (proxy.NodeHop, error) {
	cred, err := h.creds.Credential(ctx, nodeID, nodeauth.PurposeProxy)
	if err != nil {
		return proxy.NodeHop{}, err
	}
	h.mu.Lock()
	e, ok := h.scheme[nodeID]
	h.mu.Unlock()
	if !ok || time.Since(e.at) > 5*time.Second {
		n, err := h.st.GetNode(ctx, nodeID)
		if err != nil {
			return proxy.NodeHop{}, err
		}
		u, err := url.Parse(n.RPCAddress)
		if err != nil {
			return proxy.NodeHop{}, fmt.Errorf("node %q: rpc address: %w", nodeID, err)
		}
		host, _, _ := net.SplitHostPort(n.ProxyAddress)
		if u.Scheme != "https" && !nodeauth.Loopback(host) {
			return proxy.NodeHop{}, fmt.Errorf("node %q: proxy %s: plain http off loopback: %w", nodeID, n.ProxyAddress, errdefs.ErrUnavailable)
		}
		e = schemeEntry{tls: u.Scheme == "https", at: time.Now()}
		h.mu.Lock()
		h.scheme[nodeID] = e
		h.mu.Unlock()
	}
	return proxy.NodeHop{Credential: cred, TLS: e.tls}, nil
}
