package nodeclient

import (
	"context"
	"time"

	"connectrpc.com/connect"

	nodepb "github.com/warren-sandbox/warren/api/node"
	"github.com/warren-sandbox/warren/internal/node/noderpc"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/sandbox"
)

// The optional parts of nodeapi.Service, over the wire. The part that
// names directories on the node (nodeapi.TemplateSnapshotter) does not
// cross it: a path is the node's own. Sandbox snapshots cross by IDs
// (TakeSandboxSnapshot), naming no path.
var (
	_ nodeapi.Pooler             = (*Client)(nil)
	_ nodeapi.TemplateHolder     = (*Client)(nil)
	_ nodeapi.SandboxSnapshotter = (*Client)(nil)
	_ nodeapi.LogSource          = (*Client)(nil)
)

// SetPool implements nodeapi.Pooler.
func (c *Client) SetPool(ctx context.Context, tmpl nodeapi.Template, res sandbox.Resources, size int) error {
	_, err := c.rpc.SetPool(ctx, connect.NewRequest(&nodepb.SetPoolRequest{
		Template: noderpc.TemplateToProto(tmpl), Resources: noderpc.ResourcesToProto(res), Size: int32(min(size, 1<<30)),
	}))
	return noderpc.FromConnectError(err)
}

// Reserve implements nodeapi.Pooler. A failed call (the node cannot be
// reached) is a miss, logged.
func (c *Client) Reserve(tmpl nodeapi.Template, res sandbox.Resources) (string, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	resp, err := c.rpc.Reserve(ctx, connect.NewRequest(&nodepb.ReserveRequest{
		Template: noderpc.TemplateToProto(tmpl), Resources: noderpc.ResourcesToProto(res),
	}))
	if err != nil {
		c.log.Warn("node pool reserve failed", "template_id", tmpl.ID, "error", noderpc.FromConnectError(err))
		return "", false
	}
	return resp.Msg.GetId(), resp.Msg.GetFound()
}

// Unreserve implements nodeapi.Pooler. A failed call is logged; the node
// destroys a reserved member nobody claims when it restarts.
func (c *Client) Unreserve(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	if _, err := c.rpc.Unreserve(ctx, connect.NewRequest(&nodepb.UnreserveRequest{Id: id})); err != nil {
		c.log.Warn("node pool unreserve failed", "sandbox_id", id, "error", noderpc.FromConnectError(err))
	}
}

// Pools implements nodeapi.Pooler. A failed call gives no pools, logged.
func (c *Client) Pools() map[string]nodeapi.PoolStatus {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	resp, err := c.rpc.Pools(ctx, connect.NewRequest(&nodepb.PoolsRequest{}))
	if err != nil {
		c.log.Warn("node pools failed", "error", noderpc.FromConnectError(err))
		return map[string]nodeapi.PoolStatus{}
	}
	out := make(map[string]nodeapi.PoolStatus, len(resp.Msg.GetPools()))
	for id, st := range resp.Msg.GetPools() {
		out[id] = noderpc.PoolStatusFromProto(st)
	}
	return out
}

// TemplatesInUse implements nodeapi.TemplateHolder.
func (c *Client) TemplatesInUse(ctx context.Context) ([]nodeapi.TemplateUse, error) {
	resp, err := c.rpc.TemplatesInUse(ctx, connect.NewRequest(&nodepb.TemplatesInUseRequest{}))
	if err != nil {
		return nil, noderpc.FromConnectError(err)
	}
	out := make([]nodeapi.TemplateUse, 0, len(resp.Msg.GetTemplates()))
	for _, u := range resp.Msg.GetTemplates() {
		out = append(out, noderpc.TemplateUseFromProto(u))
	}
	return out, nil
}

// SnapshotSandbox implements nodeapi.SandboxSnapshotter.
func (c *Client) SnapshotSandbox(ctx context.Context, id string, req nodeapi.SnapshotRequest) (*nodeapi.SandboxSnapshot, error) {
	resp, err := c.rpc.TakeSandboxSnapshot(ctx, connect.NewRequest(&nodepb.TakeSandboxSnapshotRequest{
		Id: id, TeamId: req.TeamID, TemplateId: req.TemplateID, BuildId: req.BuildID,
	}))
	if err != nil {
		return nil, noderpc.FromConnectError(err)
	}
	return noderpc.SandboxSnapshotFromProto(resp.Msg), nil
}

// DeleteSandboxSnapshot implements nodeapi.SandboxSnapshotter.
func (c *Client) DeleteSandboxSnapshot(ctx context.Context, buildID string) error {
	_, err := c.rpc.DeleteSandboxSnapshot(ctx, connect.NewRequest(&nodepb.DeleteSandboxSnapshotRequest{BuildId: buildID}))
	return noderpc.FromConnectError(err)
}

// SandboxLogs implements nodeapi.LogSource.
func (c *Client) SandboxLogs(ctx context.Context, id string, start time.Time) ([]nodeapi.LogEntry, error) {
	resp, err := c.rpc.SandboxLogs(ctx, connect.NewRequest(&nodepb.SandboxLogsRequest{Id: id, Start: noderpc.Timestamp(start)}))
	if err != nil {
		return nil, noderpc.FromConnectError(err)
	}
	return noderpc.LogEntriesFromProto(resp.Msg.GetEntries()), nil
}

// EgressLog implements nodeapi.EgressLogger.
func (c *Client) EgressLog(ctx context.Context, id string) ([]nodeapi.EgressEntry, error) {
	resp, err := c.rpc.EgressLog(ctx, connect.NewRequest(&nodepb.EgressLogRequest{Id: id}))
	if err != nil {
		return nil, noderpc.FromConnectError(err)
	}
	return noderpc.EgressEntriesFromProto(resp.Msg.GetEntries()), nil
}
