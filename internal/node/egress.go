package node

import (
	"context"
	"errors"
	"fmt"

	"github.com/warren-sandbox/warren/internal/egressproxy"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/netslot"
	"github.com/warren-sandbox/warren/internal/nodeapi"
)

// The node's side of the egress proxy (internal/egressproxy): a network
// pool that puts slots behind it (egressproxy.Pool) gives each sandbox a
// CA of its own, which the sandbox must trust for the hosts its rules
// transform, and keeps its egress log.

// egressPool is a network pool with an egress proxy.
type egressPool interface {
	CACert(id string) ([]byte, error)
	EgressLog(id string) ([]egressproxy.Entry, error)
}

// CA paths in the sandbox (Debian's layout; other images read the
// variables of /etc/profile.d/warren-egress-ca.sh).
const (
	egressCAFile      = "/usr/local/share/ca-certificates/warren-egress-ca.crt"
	egressCABundle    = "/etc/ssl/certs/ca-certificates.crt"
	egressCAProfile   = "/etc/profile.d/warren-egress-ca.sh"
	egressCAScriptTag = "warren-egress-ca"
)

// trustCAScript installs $WARREN_EGRESS_CA (a PEM certificate) in the
// sandbox's trust store: its own file, appended to the system bundle
// unless there already, and the variables that make Node.js, Python's
// requests and OpenSSL read the bundle, for login shells (the SDK's
// commands run in one). Running it twice changes nothing.
const trustCAScript = `set -e
mkdir -p "$(dirname ` + egressCAFile + `)" "$(dirname ` + egressCABundle + `)" "$(dirname ` + egressCAProfile + `)"
printf '%s\n' "$WARREN_EGRESS_CA" > ` + egressCAFile + `
touch ` + egressCABundle + `
if ! grep -qF "$(sed -n 2p ` + egressCAFile + `)" ` + egressCABundle + `; then cat ` + egressCAFile + ` >> ` + egressCABundle + `; fi
cat > ` + egressCAProfile + ` <<'WARREN'
export NODE_EXTRA_CA_CERTS=` + egressCAFile + `
export REQUESTS_CA_BUNDLE=` + egressCABundle + `
export SSL_CERT_FILE=` + egressCABundle + `
WARREN
`

// trustEgressCA installs h's egress CA in its trust store, through its
// envd in slot as root with accessToken, when policy transforms the
// requests to some host (the proxy terminates their TLS with it). A
// sandbox whose policy transforms nothing is left alone. The caller holds
// h.op.
func (h *handle) trustEgressCA(ctx context.Context, accessToken string, slot *netslot.Slot, policy netslot.Policy) error {
	a, id := h.a, h.id
	if policy.Egress == nil || len(policy.Egress.Transforms) == 0 || slot == nil {
		return nil
	}
	ep, ok := a.cfg.Net.(egressPool)
	if !ok {
		return fmt.Errorf("network rules transform requests, but this node has no egress proxy: %w", errdefs.ErrUnsupported)
	}
	pem, err := ep.CACert(id)
	if err != nil {
		return err
	}
	code, err := a.cfg.Envd.Run(ctx, a.envdAddr(slot), accessToken, EnvdProcess{
		Tag: egressCAScriptTag, Cmd: "/bin/sh", Args: []string{"-c", trustCAScript},
		Envs: map[string]string{"WARREN_EGRESS_CA": string(pem)}, Cwd: "/", User: "root",
	})
	if err == nil && code != 0 {
		err = fmt.Errorf("exit status %d", code)
	}
	if err != nil {
		return fmt.Errorf("install the egress proxy's CA in the sandbox's trust store: %w", errors.Join(errdefs.ErrUnavailable, err))
	}
	return nil
}

// EgressLog implements nodeapi.EgressLogger: what sandbox id tried to
// reach through the egress proxy (empty for a sandbox never behind it).
func (a *Agent) EgressLog(ctx context.Context, id string) ([]nodeapi.EgressEntry, error) {
	if _, err := a.lookup(id); err != nil {
		return nil, err
	}
	ep, ok := a.cfg.Net.(egressPool)
	if !ok {
		return []nodeapi.EgressEntry{}, nil
	}
	es, err := ep.EgressLog(id)
	if errdefs.IsNotFound(err) {
		return []nodeapi.EgressEntry{}, nil
	}
	if err != nil {
		return nil, err
	}
	out := make([]nodeapi.EgressEntry, len(es))
	for i, e := range es {
		out[i] = nodeapi.EgressEntry{Time: e.Time, Proto: e.Proto, Host: e.Host, Addr: e.Addr, Port: e.Port, Allowed: e.Allowed,
			Reason: e.Reason, BytesOut: e.BytesOut, BytesIn: e.BytesIn, Duration: e.Duration, Open: e.Open}
	}
	return out, nil
}

var _ nodeapi.EgressLogger = (*Agent)(nil)
