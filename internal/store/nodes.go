package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
)

// The node registry (docs/node.md): the nodes that registered with the API,
// what they report at every heartbeat, and the capacity the control plane
// reserved on each for the sandboxes it placed there.

// Node liveness, set from heartbeats by the API (internal/nodereg).
const (
	NodeReady       = "ready"
	NodeUnreachable = "unreachable"
	NodeLost        = "lost"
)

// Node admin states, set by an operator; "" is none.
const (
	NodeDraining = "draining"
	NodeCordoned = "cordoned"
)

// NodeResources are CPUs and memory on a node.
type NodeResources struct {
	VCPUs    int64 `json:"vcpus"`
	MemoryMB int64 `json:"memoryMB"`
}

// Fits reports whether need fits beside a on capacity c.
func (c NodeResources) Fits(a, need NodeResources) bool {
	return a.VCPUs+need.VCPUs <= c.VCPUs && a.MemoryMB+need.MemoryMB <= c.MemoryMB
}

// NodePool is one warm pool a node reports.
type NodePool struct {
	TemplateID string `json:"templateID"`
	BuildID    string `json:"buildID"`
	Size       int    `json:"size"`
	Ready      int    `json:"ready"`
}

// Node is one registered node.
type Node struct {
	ID string
	// RPCAddress is the base URL of its node RPC server; ProxyAddress the
	// host:port of its sandbox traffic listener.
	RPCAddress   string
	ProxyAddress string
	// BootID changes every time the node process starts: a new one means
	// none of its sandboxes survived.
	BootID  string
	Version string
	// Capacity is what the node offers; Allocated what the control plane
	// reserved on it (the sum of its reservations); Reported the node's
	// own count of what its sandboxes use, at the last heartbeat.
	Capacity          NodeResources
	Allocated         NodeResources
	Reported          NodeResources
	ReportedSandboxes int
	// Templates are the build IDs the node holds.
	Templates []string
	Pools     []NodePool
	// AdminStatus is NodeDraining, NodeCordoned or "".
	AdminStatus string
	// Liveness is NodeReady, NodeUnreachable or NodeLost.
	Liveness      string
	RegisteredAt  time.Time
	LastHeartbeat time.Time
}

// Status is the node's one-word state: its liveness when it is not ready,
// else its admin status, else ready.
func (n *Node) Status() string {
	if n.Liveness != NodeReady || n.AdminStatus == "" {
		return n.Liveness
	}
	return n.AdminStatus
}

// Schedulable reports whether new sandboxes may be placed on the node.
func (n *Node) Schedulable() bool { return n.Liveness == NodeReady && n.AdminStatus == "" }

// HoldsTemplate reports whether the node said it holds build buildID.
func (n *Node) HoldsTemplate(buildID string) bool {
	for _, b := range n.Templates {
		if b == buildID {
			return true
		}
	}
	return false
}

// NodeRegistry is the node registry's part of the store (implemented by
// *SQL); internal/nodereg and internal/placement use it.
type NodeRegistry interface {
	HeartbeatNode(ctx context.Context, n *Node) (*Node, error)
	GetNode(ctx context.Context, id string) (*Node, error)
	ListNodes(ctx context.Context) ([]*Node, error)
	SetNodeAdminStatus(ctx context.Context, id, status string) error
	MarkStaleNodes(ctx context.Context, before time.Time, to string, from ...string) ([]string, error)
	ReserveOnNode(ctx context.Context, nodeID, sandboxID string, need NodeResources) error
	ReleaseReservation(ctx context.Context, sandboxID string) (bool, error)
	ClearNodeReservations(ctx context.Context, nodeID string) error
	CountSandboxesByNode(ctx context.Context) (map[string]int, error)
}

var _ NodeRegistry = (*SQL)(nil)

const nodeCols = `id, rpc_address, proxy_address, boot_id, version, capacity_vcpus, capacity_memory_mb,
allocated_vcpus, allocated_memory_mb, reported_vcpus, reported_memory_mb, reported_sandboxes,
templates, pools, admin_status, liveness, registered_at, last_heartbeat`

func scanNode(sc interface{ Scan(...any) error }) (*Node, error) {
	var n Node
	var templates, pools string
	var registered, heartbeat int64
	if err := sc.Scan(&n.ID, &n.RPCAddress, &n.ProxyAddress, &n.BootID, &n.Version, &n.Capacity.VCPUs, &n.Capacity.MemoryMB,
		&n.Allocated.VCPUs, &n.Allocated.MemoryMB, &n.Reported.VCPUs, &n.Reported.MemoryMB, &n.ReportedSandboxes,
		&templates, &pools, &n.AdminStatus, &n.Liveness, &registered, &heartbeat); err != nil {
		return nil, err
	}
	if err := json.Unmarshal([]byte(templates), &n.Templates); err != nil {
		return nil, fmt.Errorf("node %q: decode templates: %w", n.ID, err)
	}
	if err := json.Unmarshal([]byte(pools), &n.Pools); err != nil {
		return nil, fmt.Errorf("node %q: decode pools: %w", n.ID, err)
	}
	n.RegisteredAt, n.LastHeartbeat = fromNanos(registered), fromNanos(heartbeat)
	return &n, nil
}

// HeartbeatNode records a registration or heartbeat of node n (its ID,
// addresses, boot ID, version, capacity, reported use, templates and
// pools; the other fields are ignored): the row is added or updated, the
// node is ready again and its heartbeat time is now. It returns the row as
// it was before (nil for a node never seen), so the caller can tell a
// restarted node by its boot ID.
func (s *SQL) HeartbeatNode(ctx context.Context, n *Node) (*Node, error) {
	what := fmt.Sprintf("node %q", n.ID)
	templates, err := json.Marshal(nonNil(n.Templates))
	if err != nil {
		return nil, fmt.Errorf("%s: encode templates: %w", what, err)
	}
	pools, err := json.Marshal(nonNil(n.Pools))
	if err != nil {
		return nil, fmt.Errorf("%s: encode pools: %w", what, err)
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, classify(err, what)
	}
	defer tx.Rollback() // after Commit it is a no-op
	prev, err := scanNode(tx.QueryRowContext(ctx, s.d.rebind(`SELECT `+nodeCols+` FROM nodes WHERE id = ?`+s.d.forUpdate), n.ID))
	if err := classify(err, what); err != nil && !errdefs.IsNotFound(err) {
		return nil, err
	}
	now := nowNanos()
	if prev != nil {
		_, err = tx.ExecContext(ctx, s.d.rebind(`UPDATE nodes SET rpc_address = ?, proxy_address = ?, boot_id = ?, version = ?,
capacity_vcpus = ?, capacity_memory_mb = ?, reported_vcpus = ?, reported_memory_mb = ?, reported_sandboxes = ?,
templates = ?, pools = ?, liveness = ?, last_heartbeat = ? WHERE id = ?`),
			n.RPCAddress, n.ProxyAddress, n.BootID, n.Version, n.Capacity.VCPUs, n.Capacity.MemoryMB,
			n.Reported.VCPUs, n.Reported.MemoryMB, n.ReportedSandboxes, string(templates), string(pools), NodeReady, now, n.ID)
	} else {
		_, err = tx.ExecContext(ctx, s.d.rebind(`INSERT INTO nodes (`+nodeCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, 0, 0, ?, ?, ?, ?, ?, '', ?, ?, ?)`),
			n.ID, n.RPCAddress, n.ProxyAddress, n.BootID, n.Version, n.Capacity.VCPUs, n.Capacity.MemoryMB,
			n.Reported.VCPUs, n.Reported.MemoryMB, n.ReportedSandboxes, string(templates), string(pools), NodeReady, now, now)
	}
	if err != nil {
		return nil, classify(err, what)
	}
	return prev, classify(tx.Commit(), what)
}

func nonNil[T any](v []T) []T {
	if v == nil {
		return []T{}
	}
	return v
}

// GetNode returns one node.
func (s *SQL) GetNode(ctx context.Context, id string) (*Node, error) {
	n, err := scanNode(s.db.QueryRowContext(ctx, s.d.rebind(`SELECT `+nodeCols+` FROM nodes WHERE id = ?`), id))
	return n, classify(err, fmt.Sprintf("node %q", id))
}

// ListNodes returns every node, by ID.
func (s *SQL) ListNodes(ctx context.Context) ([]*Node, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+nodeCols+` FROM nodes ORDER BY id`)
	if err != nil {
		return nil, classify(err, "nodes")
	}
	defer rows.Close()
	var out []*Node
	for rows.Next() {
		n, err := scanNode(rows)
		if err != nil {
			return nil, classify(err, "nodes")
		}
		out = append(out, n)
	}
	return out, classify(rows.Err(), "nodes")
}

// SetNodeAdminStatus sets a node's admin status (NodeDraining,
// NodeCordoned, or "" to uncordon).
func (s *SQL) SetNodeAdminStatus(ctx context.Context, id, status string) error {
	switch status {
	case "", NodeDraining, NodeCordoned:
	default:
		return fmt.Errorf("node %q: admin status %q: %w", id, status, errdefs.ErrInvalid)
	}
	res, err := s.db.ExecContext(ctx, s.d.rebind(`UPDATE nodes SET admin_status = ? WHERE id = ?`), status, id)
	if err != nil {
		return classify(err, fmt.Sprintf("node %q", id))
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return errdefs.Publicf(errdefs.ErrNotFound, "node %q", id)
	}
	return nil
}

// MarkStaleNodes sets the liveness of the nodes in one of the states from
// whose last heartbeat is before before to to, and returns their IDs. The
// update is one statement: of several API replicas doing it at once, each
// node's change is returned to one only.
func (s *SQL) MarkStaleNodes(ctx context.Context, before time.Time, to string, from ...string) ([]string, error) {
	args := []any{to, toNanos(before)}
	ph := make([]string, len(from))
	for i, f := range from {
		ph[i] = "?"
		args = append(args, f)
	}
	rows, err := s.db.QueryContext(ctx, s.d.rebind(`UPDATE nodes SET liveness = ? WHERE last_heartbeat < ? AND liveness IN (`+strings.Join(ph, ", ")+`) RETURNING id`), args...)
	if err != nil {
		return nil, classify(err, "nodes")
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, classify(err, "nodes")
		}
		ids = append(ids, id)
	}
	return ids, classify(rows.Err(), "nodes")
}

// ReserveOnNode reserves need on node nodeID for sandbox sandboxID and
// records the node on the sandbox's row (when it has one), in one
// transaction. The reservation is one conditional UPDATE of the node row,
// so processes sharing the database never reserve more than its capacity:
// a node that is not schedulable or lacks room is ErrExhausted. A sandbox
// that holds a reservation on that node already keeps it (nil); one on
// another node is ErrConflict.
func (s *SQL) ReserveOnNode(ctx context.Context, nodeID, sandboxID string, need NodeResources) error {
	what := fmt.Sprintf("node %q: reserve for sandbox %q", nodeID, sandboxID)
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return classify(err, what)
	}
	defer tx.Rollback() // after Commit it is a no-op
	var held string
	err = tx.QueryRowContext(ctx, s.d.rebind(`SELECT node_id FROM node_reservations WHERE sandbox_id = ?`), sandboxID).Scan(&held)
	switch e := classify(err, what); {
	case err == nil && held == nodeID:
		return nil
	case err == nil:
		return fmt.Errorf("%s: reserved on node %q: %w", what, held, errdefs.ErrConflict)
	case !errdefs.IsNotFound(e):
		return e
	}
	res, err := tx.ExecContext(ctx, s.d.rebind(`UPDATE nodes SET allocated_vcpus = allocated_vcpus + ?, allocated_memory_mb = allocated_memory_mb + ?
WHERE id = ? AND liveness = ? AND admin_status = '' AND allocated_vcpus + ? <= capacity_vcpus AND allocated_memory_mb + ? <= capacity_memory_mb`),
		need.VCPUs, need.MemoryMB, nodeID, NodeReady, need.VCPUs, need.MemoryMB)
	if err != nil {
		return classify(err, what)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("%s: no room or not schedulable: %w", what, errdefs.ErrExhausted)
	}
	if _, err := tx.ExecContext(ctx, s.d.rebind(`INSERT INTO node_reservations (sandbox_id, node_id, vcpus, memory_mb, created_at) VALUES (?, ?, ?, ?, ?)`),
		sandboxID, nodeID, need.VCPUs, need.MemoryMB, nowNanos()); err != nil {
		return classify(err, what)
	}
	if _, err := tx.ExecContext(ctx, s.d.rebind(`UPDATE sandboxes SET node_id = ? WHERE id = ?`), nodeID, sandboxID); err != nil {
		return classify(err, what)
	}
	return classify(tx.Commit(), what)
}

// ReleaseReservation gives back the capacity reserved for sandbox
// sandboxID, once: it reports whether there was a reservation.
func (s *SQL) ReleaseReservation(ctx context.Context, sandboxID string) (bool, error) {
	what := fmt.Sprintf("release reservation of sandbox %q", sandboxID)
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return false, classify(err, what)
	}
	defer tx.Rollback() // after Commit it is a no-op
	var nodeID string
	var r NodeResources
	err = tx.QueryRowContext(ctx, s.d.rebind(`DELETE FROM node_reservations WHERE sandbox_id = ? RETURNING node_id, vcpus, memory_mb`), sandboxID).
		Scan(&nodeID, &r.VCPUs, &r.MemoryMB)
	if e := classify(err, what); errdefs.IsNotFound(e) {
		return false, nil
	} else if e != nil {
		return false, e
	}
	if _, err := tx.ExecContext(ctx, s.d.rebind(`UPDATE nodes SET allocated_vcpus = allocated_vcpus - ?, allocated_memory_mb = allocated_memory_mb - ? WHERE id = ?`),
		r.VCPUs, r.MemoryMB, nodeID); err != nil {
		return false, classify(err, what)
	}
	return true, classify(tx.Commit(), what)
}

// ClearNodeReservations drops every reservation on node nodeID (its
// sandboxes are gone: the node restarted or was lost).
func (s *SQL) ClearNodeReservations(ctx context.Context, nodeID string) error {
	what := fmt.Sprintf("node %q: clear reservations", nodeID)
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return classify(err, what)
	}
	defer tx.Rollback() // after Commit it is a no-op
	if _, err := tx.ExecContext(ctx, s.d.rebind(`DELETE FROM node_reservations WHERE node_id = ?`), nodeID); err != nil {
		return classify(err, what)
	}
	if _, err := tx.ExecContext(ctx, s.d.rebind(`UPDATE nodes SET allocated_vcpus = 0, allocated_memory_mb = 0 WHERE id = ?`), nodeID); err != nil {
		return classify(err, what)
	}
	return classify(tx.Commit(), what)
}

// CountSandboxesByNode counts the live sandboxes of each node.
func (s *SQL) CountSandboxesByNode(ctx context.Context) (map[string]int, error) {
	args := make([]any, len(LiveStates))
	ph := make([]string, len(LiveStates))
	for i, st := range LiveStates {
		ph[i], args[i] = "?", string(st)
	}
	rows, err := s.db.QueryContext(ctx, s.d.rebind(`SELECT node_id, COUNT(*) FROM sandboxes WHERE state IN (`+strings.Join(ph, ", ")+`) GROUP BY node_id`), args...)
	if err != nil {
		return nil, classify(err, "sandboxes by node")
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			return nil, classify(err, "sandboxes by node")
		}
		out[id] = n
	}
	return out, classify(rows.Err(), "sandboxes by node")
}
