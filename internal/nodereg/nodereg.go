// Package nodereg is node registration and liveness (docs/node.md): a
// node calls the API with its node token (it never gets database
// credentials) and heartbeats every few seconds with its addresses, boot
// ID, version, capacity, what it runs, the templates it holds and its
// pools; the API records it in the store's node registry.
//
// The wire is JSON over HTTP on the API's listener:
//
//	POST /nodes/heartbeat   Authorization: Bearer <node token>   body: Status
//
// (the first heartbeat registers the node). The token is the node's own
// (Credentials, internal/nodeauth): a heartbeat is accepted only for the
// node ID the token is bound to. Liveness runs on the API: a
// node without a heartbeat for UnreachableAfter gets no placements; after
// LostAfter its running sandboxes are killed with node_lost, after
// PausedLostAfter its paused ones too. A node that heartbeats with a new
// boot ID lost every running sandbox: they are killed the same way.
//
// The admin routes (GET /admin/nodes, POST /admin/nodes/{id}/drain|cordon|
// uncordon) are in admin.go; the node's side, Client, in client.go.
package nodereg

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/errdefs/errhttp"
	"github.com/warren-sandbox/warren/internal/nodeauth"
	"github.com/warren-sandbox/warren/internal/sandbox"
	"github.com/warren-sandbox/warren/internal/store"
)

// HeartbeatPath is the route of registration and heartbeats.
const HeartbeatPath = "/nodes/heartbeat"

// Status is what a node reports at every heartbeat.
type Status struct {
	ID string `json:"id"`
	// RPCAddress is the base URL of the node's RPC server (e.g.
	// "http://10.0.0.5:5009"); ProxyAddress the host:port of its sandbox
	// traffic listener.
	RPCAddress   string `json:"rpcAddress"`
	ProxyAddress string `json:"proxyAddress"`
	BootID       string `json:"bootID"`
	Version      string `json:"version"`
	// Capacity is what the node offers to sandboxes; Allocated what its
	// sandboxes are given now (the sum of their resources).
	Capacity  store.NodeResources `json:"capacity"`
	Allocated store.NodeResources `json:"allocated"`
	Sandboxes int                 `json:"sandboxes"`
	// Templates are the build IDs the node holds.
	Templates []string         `json:"templates,omitempty"`
	Pools     []store.NodePool `json:"pools,omitempty"`
	// Kills are the kills the node made on its own that no reply has
	// acknowledged yet, oldest first (kills.go).
	Kills []Kill `json:"kills,omitempty"`
}

// Reply is the API's answer to a heartbeat.
type Reply struct {
	// Status is the node's state as the API sees it (ready, draining,
	// cordoned): a draining or cordoned node should stop refilling its
	// pools.
	Status string `json:"status"`
	// AckedKills are the reported kills the node may forget (kills.go).
	AckedKills []KillAck `json:"ackedKills,omitempty"`
}

// idPattern is what a node ID may be: a host name (warren node's
// default ID) fits.
var idPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,252}$`)

// ValidID checks a node ID.
func ValidID(id string) error {
	if !idPattern.MatchString(id) {
		return errdefs.Publicf(errdefs.ErrInvalid, "node id %q: 1 to 253 letters, digits, '.', '-' and '_', starting with a letter or digit", id)
	}
	return nil
}

func (s *Status) validate() error {
	if err := ValidID(s.ID); err != nil {
		return err
	}
	switch {
	case s.BootID == "" || len(s.BootID) > 128:
		return errdefs.Publicf(errdefs.ErrInvalid, "node %q: boot id: 1 to 128 characters", s.ID)
	case len(s.RPCAddress) > 512 || len(s.ProxyAddress) > 512 || len(s.Version) > 128:
		return errdefs.Publicf(errdefs.ErrInvalid, "node %q: an address or the version is too long", s.ID)
	case s.Capacity.VCPUs < 0 || s.Capacity.MemoryMB < 0 || s.Allocated.VCPUs < 0 || s.Allocated.MemoryMB < 0 || s.Sandboxes < 0:
		return errdefs.Publicf(errdefs.ErrInvalid, "node %q: capacity and allocation must not be negative", s.ID)
	case len(s.Templates) > 10000 || len(s.Pools) > 10000:
		return errdefs.Publicf(errdefs.ErrInvalid, "node %q: too many templates or pools", s.ID)
	}
	return validKills(s.ID, s.Kills)
}

// validateAddresses checks the addresses of a node that heartbeats over
// the wire: the control plane calls it over TLS, or over plain HTTP on
// loopback only (its credentials cross no network in clear), and reaches
// its sandboxes through its proxy listener only. (warren serve's
// in-process node has none.)
func (s *Status) validateAddresses() error {
	if err := nodeauth.CheckRPCURL(s.RPCAddress); err != nil {
		return errdefs.Wrapf(err, "node %q", s.ID)
	}
	host, port, err := net.SplitHostPort(s.ProxyAddress)
	switch {
	case err != nil || host == "" || port == "":
		return errdefs.Publicf(errdefs.ErrInvalid, "node %q: proxy address %q: want HOST:PORT", s.ID, s.ProxyAddress)
	case strings.HasPrefix(s.RPCAddress, "http://") && !nodeauth.Loopback(host):
		return errdefs.Publicf(errdefs.ErrInvalid, "node %q: proxy address %q: plain http off loopback", s.ID, s.ProxyAddress)
	}
	return nil
}

// Killer kills a sandbox for a reason (lifecycle.Manager), recording the
// kill and its event.
type Killer interface {
	Kill(ctx context.Context, teamID, id string, reason sandbox.KillReason) error
}

// Store is the store with its node registry (*store.SQL).
type Store interface {
	store.Store
	store.NodeRegistry
}

// Registry records heartbeats and settles restarted nodes.
type Registry struct {
	st     Store
	nodes  store.NodeRegistry
	killer Killer
	log    *slog.Logger
	// heartbeats is node_heartbeats_total (nil until RegisterMetrics).
	heartbeats *prometheus.CounterVec
	// onBack (SetOnNodeBack) hears of a node that registered, restarted
	// or came back after missed heartbeats.
	onBack func(nodeID string)
}

// SetOnNodeBack sets what hears of a node that registered, restarted or
// came back after missed heartbeats: the control plane reconciles with it
// (the store is the truth; what the node runs that the store has killed
// is killed there). fn must not block.
func (r *Registry) SetOnNodeBack(fn func(nodeID string)) { r.onBack = fn }

// NewRegistry returns a registry over st; killer may be nil until
// SetKiller.
func NewRegistry(st Store, killer Killer, log *slog.Logger) *Registry {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Registry{st: st, nodes: st, killer: killer, log: log}
}

// SetKiller sets the killer (the lifecycle, built after the registry).
func (r *Registry) SetKiller(k Killer) { r.killer = k }

// Record stores one heartbeat of node st and returns the node's state.
// A node back with a new boot ID lost its running sandboxes: they are
// killed with node_lost and its reservations dropped.
func (r *Registry) Record(ctx context.Context, st Status) (string, error) {
	if err := st.validate(); err != nil {
		return "", err
	}
	prev, err := r.nodes.HeartbeatNode(ctx, &store.Node{
		ID: st.ID, RPCAddress: st.RPCAddress, ProxyAddress: st.ProxyAddress, BootID: st.BootID, Version: st.Version,
		Capacity: st.Capacity, Reported: st.Allocated, ReportedSandboxes: st.Sandboxes, Templates: st.Templates, Pools: st.Pools,
	})
	if err != nil {
		return "", err
	}
	switch {
	case prev == nil:
		r.log.Info("node registered", "node_id", st.ID, "rpc_address", st.RPCAddress, "boot_id", st.BootID, "version", st.Version)
	case prev.BootID != st.BootID:
		r.log.Warn("node restarted (new boot ID): sandboxes that ran there are lost", "node_id", st.ID, "boot_id", st.BootID, "previous_boot_id", prev.BootID)
		if err := r.KillLost(ctx, st.ID, store.ActiveStates); err != nil {
			return "", err
		}
		if err := r.nodes.ClearNodeReservations(ctx, st.ID); err != nil {
			return "", err
		}
	case prev.Liveness != store.NodeReady:
		r.log.Info("node back", "node_id", st.ID, "was", prev.Liveness)
	}
	if r.onBack != nil && (prev == nil || prev.BootID != st.BootID || prev.Liveness != store.NodeReady) {
		r.onBack(st.ID)
	}
	n, err := r.nodes.GetNode(ctx, st.ID)
	if err != nil {
		return "", err
	}
	return n.Status(), nil
}

// KillLost kills node nodeID's sandboxes in states with node_lost.
func (r *Registry) KillLost(ctx context.Context, nodeID string, states []sandbox.State) error {
	return r.killLost(ctx, nodeID, states, false)
}

// killLost is KillLost; whileLost checks before each kill that the node is
// still lost, and stops at the first look that finds it heard again.
func (r *Registry) killLost(ctx context.Context, nodeID string, states []sandbox.State, whileLost bool) error {
	sbs, err := r.st.ListSandboxes(ctx, store.SandboxFilter{NodeID: nodeID, States: states})
	if err != nil {
		return fmt.Errorf("node %q: %w", nodeID, err)
	}
	if len(sbs) > 0 && r.killer == nil {
		return fmt.Errorf("node %q: no lifecycle to kill its lost sandboxes: %w", nodeID, errdefs.ErrUnavailable)
	}
	for _, sb := range sbs {
		if whileLost {
			n, err := r.nodes.GetNode(ctx, nodeID)
			if err != nil {
				return fmt.Errorf("node %q: %w", nodeID, err)
			}
			if n.Liveness != store.NodeLost {
				r.log.Info("lost node heard again: its sandboxes are left to it", "node_id", nodeID, "liveness", n.Liveness)
				return nil
			}
		}
		err := r.killer.Kill(ctx, sb.TeamID, sb.ID, sandbox.KillNodeLost)
		switch {
		case err == nil:
			r.log.Warn("sandbox lost with its node", "sandbox_id", sb.ID, "node_id", nodeID, "kill_reason", sandbox.KillNodeLost.String())
		case errdefs.IsNotFound(err): // killed meanwhile
		default:
			r.log.Warn("kill lost sandbox", "sandbox_id", sb.ID, "node_id", nodeID, "error", err)
		}
	}
	return nil
}

// Authenticator tells which node a request comes from (Credentials):
// "" is any node (the insecure loopback mode), an error refuses it.
type Authenticator interface {
	Authenticate(r *http.Request) (nodeID string, err error)
}

// Handler serves HeartbeatPath for the nodes auth authenticates; each
// heartbeats for itself only (403 for another node's ID).
func (r *Registry) Handler(auth Authenticator) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			writeError(w, http.StatusMethodNotAllowed, "use POST")
			return
		}
		nodeID, err := auth.Authenticate(req)
		if err != nil {
			r.countHeartbeat("unauthorized")
			if !errors.Is(err, errdefs.ErrUnauthorized) {
				r.log.Error("node heartbeat: authentication", "error", err)
				writeError(w, http.StatusInternalServerError, "internal error")
				return
			}
			r.log.Warn("node heartbeat refused", "remote_addr", req.RemoteAddr, "error", err)
			writeError(w, http.StatusUnauthorized, "invalid node token")
			return
		}
		var st Status
		dec := json.NewDecoder(http.MaxBytesReader(w, req.Body, 1<<20))
		if err := dec.Decode(&st); err != nil {
			r.countHeartbeat("invalid")
			writeError(w, http.StatusBadRequest, "invalid heartbeat body: "+bodyError(err))
			return
		}
		if err := st.validateAddresses(); err != nil {
			r.countHeartbeat("invalid")
			errhttp.Write(w, err)
			return
		}
		if nodeID != "" && st.ID != nodeID {
			r.countHeartbeat("forbidden")
			r.log.Warn("node heartbeat for another node refused", "node_id", nodeID, "claimed_node_id", st.ID, "remote_addr", req.RemoteAddr)
			writeError(w, http.StatusForbidden, fmt.Sprintf("this node token is node %q's, not %q's", nodeID, st.ID))
			return
		}
		// The status, and the kills it reports (each taken only for a
		// sandbox placed on this node, in its execution), are the node's
		// the token names.
		reply, err := r.Beat(req.Context(), st)
		if err != nil {
			outcome := "error"
			if errdefs.IsInvalid(err) {
				outcome = "invalid"
			}
			r.countHeartbeat(outcome)
			if he := errhttp.Write(w, err); he.Code >= 500 {
				r.log.Error("node heartbeat", "node_id", st.ID, "error", err)
			}
			return
		}
		r.countHeartbeat("accepted")
		writeJSON(w, http.StatusOK, reply)
	})
}

func bodyError(err error) string {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return "larger than 1 MiB"
	}
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	if errors.As(err, &se) || errors.As(err, &te) {
		return err.Error()
	}
	return "unreadable"
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v) // the client went away
}

// writeError answers with status and msg in the API's error body.
func writeError(w http.ResponseWriter, status int, msg string) { errhttp.WriteBody(w, status, msg) }
