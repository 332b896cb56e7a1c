package nodereg

import (
	"fmt"
	"net/http"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/errdefs/errhttp"
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
//
// Their errors are answered through errhttp's table, with the API's body.
func (r *Registry) AdminRoutes(handle func(pattern string, h http.Handler)) {
	serve := func(h errhttp.ReturnHandlerFunc) http.Handler {
		return errhttp.Handler(h, errhttp.Log(r.log, "node admin"))
	}
	handle("GET /admin/nodes", serve(r.listNodes))
	handle("GET /admin/nodes/{nodeID}", serve(r.getNode))
	for action, status := range map[string]string{"drain": store.NodeDraining, "cordon": store.NodeCordoned, "uncordon": ""} {
		handle("POST /admin/nodes/{nodeID}/"+action, serve(func(w http.ResponseWriter, req *http.Request) error {
			return r.setAdminStatus(w, req, status)
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

func (r *Registry) listNodes(w http.ResponseWriter, req *http.Request) error {
	out, err := r.Nodes(req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (r *Registry) getNode(w http.ResponseWriter, req *http.Request) error {
	id := req.PathValue("nodeID")
	n, err := r.nodes.GetNode(req.Context(), id)
	if err != nil {
		return nodeErr(id, err)
	}
	counts, err := r.nodes.CountSandboxesByNode(req.Context())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, info(n, counts[n.ID]))
	return nil
}

func (r *Registry) setAdminStatus(w http.ResponseWriter, req *http.Request, status string) error {
	id := req.PathValue("nodeID")
	if err := r.nodes.SetNodeAdminStatus(req.Context(), id, status); err != nil {
		return nodeErr(id, err)
	}
	r.log.Info("node admin status set", "node_id", id, "admin_status", status)
	return r.getNode(w, req)
}

// nodeErr is err of an operation on node id, as the admin is told of it.
func nodeErr(id string, err error) error {
	if errdefs.IsNotFound(err) {
		return errdefs.WithMessage(err, fmt.Sprintf("node %q not found", id))
	}
	return err
}

func nonNil[T any](v []T) []T {
	if v == nil {
		return []T{}
	}
	return v
}
