package nodereg

import (
	"net/http"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/store"
)

// NodeInfo is one node in GET /admin/nodes.
type NodeInfo struct {
	ID           string `json:"id"`
	RPCAddress   string `json:"rpcAddress"`
	ProxyAddress string `json:"proxyAddress"`
	// Status is ready, draining, cordoned, unreachable or lost.
	Status  string `json:"status"`
	Version string `json:"version"`
	BootID  string `json:"bootID"`
	// Capacity is what the node offers; Allocated what the control plane
	// reserved on it; Reported what the node said its sandboxes use.
	Capacity  store.NodeResources `json:"capacity"`
	Allocated store.NodeResources `json:"allocated"`
	Reported  store.NodeResources `json:"reported"`
	// Sandboxes counts the live sandboxes the store places on the node.
	Sandboxes     int              `json:"sandboxes"`
	Templates     []string         `json:"templates"`
	Pools         []store.NodePool `json:"pools"`
	RegisteredAt  time.Time        `json:"registeredAt"`
	LastHeartbeat time.Time        `json:"lastHeartbeat"`
}

// AdminRoutes adds the node admin routes through handle, which must
// authenticate the admin (apiserver.Server.HandleAdmin):
//
//	GET  /admin/nodes
//	GET  /admin/nodes/{nodeID}
//	POST /admin/nodes/{nodeID}/drain | cordon | uncordon
func (r *Registry) AdminRoutes(handle func(pattern string, h http.Handler)) {
	handle("GET /admin/nodes", http.HandlerFunc(r.listNodes))
	handle("GET /admin/nodes/{nodeID}", http.HandlerFunc(r.getNode))
	for action, status := range map[string]string{"drain": store.NodeDraining, "cordon": store.NodeCordoned, "uncordon": ""} {
		handle("POST /admin/nodes/{nodeID}/"+action, http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			r.setAdminStatus(w, req, status)
		}))
	}
}

// Nodes lists every node as GET /admin/nodes shows it.
func (r *Registry) Nodes(req *http.Request) ([]NodeInfo, error) {
	nodes, err := r.nodes.ListNodes(req.Context())
	if err != nil {
		return nil, err
	}
	counts, err := r.nodes.CountSandboxesByNode(req.Context())
	if err != nil {
		return nil, err
	}
	out := make([]NodeInfo, 0, len(nodes))
	for _, n := range nodes {
		out = append(out, info(n, counts[n.ID]))
	}
	return out, nil
}

func info(n *store.Node, sandboxes int) NodeInfo {
	return NodeInfo{
		ID: n.ID, RPCAddress: n.RPCAddress, ProxyAddress: n.ProxyAddress, Status: n.Status(), Version: n.Version, BootID: n.BootID,
		Capacity: n.Capacity, Allocated: n.Allocated, Reported: n.Reported, Sandboxes: sandboxes,
		Templates: nonNil(n.Templates), Pools: nonNil(n.Pools), RegisteredAt: n.RegisteredAt, LastHeartbeat: n.LastHeartbeat,
	}
}

func (r *Registry) listNodes(w http.ResponseWriter, req *http.Request) {
	out, err := r.Nodes(req)
	if err != nil {
		r.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func (r *Registry) getNode(w http.ResponseWriter, req *http.Request) {
	n, err := r.nodes.GetNode(req.Context(), req.PathValue("nodeID"))
	if err != nil {
		r.fail(w, err)
		return
	}
	counts, err := r.nodes.CountSandboxesByNode(req.Context())
	if err != nil {
		r.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, info(n, counts[n.ID]))
}

func (r *Registry) setAdminStatus(w http.ResponseWriter, req *http.Request, status string) {
	id := req.PathValue("nodeID")
	if err := r.nodes.SetNodeAdminStatus(req.Context(), id, status); err != nil {
		r.fail(w, err)
		return
	}
	r.log.Info("node admin status set", "node_id", id, "admin_status", status)
	r.getNode(w, req)
}

func (r *Registry) fail(w http.ResponseWriter, err error) {
	switch {
	case errdefs.IsNotFound(err):
		writeError(w, http.StatusNotFound, err.Error())
	case errdefs.IsInvalid(err):
		writeError(w, http.StatusBadRequest, err.Error())
	default:
		r.log.Error("node admin", "error", err)
		writeError(w, http.StatusInternalServerError, "internal error")
	}
}

func nonNil[T any](v []T) []T {
	if v == nil {
		return []T{}
	}
	return v
}
