// Package nodeclient is a nodeapi.Service that calls a remote node agent over
// Connect RPC (the NodeService of api/node/node.proto, served by
// noderpc). Errors come back in Warren's error classes, so the control
// plane treats a remote node like the in-process agent.
package nodeclient

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"connectrpc.com/connect"

	nodepb "github.com/warren-sandbox/warren/api/node"
	"github.com/warren-sandbox/warren/api/node/nodepbconnect"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/node/noderpc"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/nodeauth"
	"github.com/warren-sandbox/warren/internal/sandbox"
)

// Options tune the client.
type Options struct {
	// HTTPClient carries the calls; nil means nodeauth.Client(TLS): no
	// proxy from the environment and no redirects (a node answers for
	// itself; a redirect would take the call's credential elsewhere).
	HTTPClient *http.Client
	// TLS verifies the node's certificate when HTTPClient is nil (nil:
	// the system's roots).
	TLS *tls.Config
	// Token is sent as "Authorization: Bearer <token>" when set: the
	// node's RPC credential (nodeauth.Credential(token, PurposeRPC)).
	Token string
	// Credential, when set, gives the bearer of each call instead of
	// Token (the control plane's credential of the node, which follows a
	// rotation of its token).
	Credential func(ctx context.Context) (string, error)
	// Logger receives the failures of the calls whose Go signature has no
	// error (Reserve, Unreserve, Pools of nodeapi.Pooler).
	Logger *slog.Logger
	// CallTimeout bounds those calls, which have no context either
	// (default 10 s).
	CallTimeout time.Duration
}

// Client is a nodeapi.Service over RPC, with every optional part that
// names no path on the node (nodeapi.Pooler, MetricsSource,
// ExecutionKiller, TemplateHolder, SandboxSnapshotter, LogSource): a node
// that lacks one answers ErrUnsupported. A template crosses as its ID and
// build ID only; the node resolves its files.
type Client struct {
	rpc     nodepbconnect.NodeServiceClient
	log     *slog.Logger
	timeout time.Duration
}

var _ nodeapi.Service = (*Client)(nil)

// New returns a client of the node agent at baseURL (e.g.
// "http://10.0.0.5:5009").
func New(baseURL string, opts Options) *Client {
	hc := opts.HTTPClient
	if hc == nil {
		hc = nodeauth.Client(opts.TLS)
	}
	var copts []connect.ClientOption
	switch {
	case opts.Credential != nil:
		copts = append(copts, connect.WithInterceptors(&bearerInterceptor{cred: opts.Credential}))
	case opts.Token != "":
		tok := opts.Token
		copts = append(copts, connect.WithInterceptors(&bearerInterceptor{cred: func(context.Context) (string, error) { return tok, nil }}))
	}
	c := &Client{rpc: nodepbconnect.NewNodeServiceClient(hc, baseURL, copts...), log: opts.Logger, timeout: opts.CallTimeout}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	if c.timeout <= 0 {
		c.timeout = 10 * time.Second
	}
	return c
}

// Create implements nodeapi.Service.
func (c *Client) Create(ctx context.Context, req nodeapi.CreateRequest) (*nodeapi.Sandbox, error) {
	resp, err := c.rpc.Create(ctx, connect.NewRequest(noderpc.CreateToProto(req)))
	if err != nil {
		return nil, noderpc.FromConnectError(err)
	}
	return noderpc.SandboxFromProto(resp.Msg.GetSandbox())
}

// Get implements nodeapi.Service.
func (c *Client) Get(ctx context.Context, id string) (*nodeapi.Sandbox, error) {
	resp, err := c.rpc.Get(ctx, connect.NewRequest(&nodepb.GetRequest{Id: id}))
	if err != nil {
		return nil, noderpc.FromConnectError(err)
	}
	return noderpc.SandboxFromProto(resp.Msg.GetSandbox())
}

// List implements nodeapi.Service.
func (c *Client) List(ctx context.Context) ([]*nodeapi.Sandbox, error) {
	resp, err := c.rpc.List(ctx, connect.NewRequest(&nodepb.ListRequest{}))
	if err != nil {
		return nil, noderpc.FromConnectError(err)
	}
	return sandboxes(resp.Msg.GetSandboxes())
}

func sandboxes(in []*nodepb.Sandbox) ([]*nodeapi.Sandbox, error) {
	out := make([]*nodeapi.Sandbox, 0, len(in))
	for _, p := range in {
		s, err := noderpc.SandboxFromProto(p)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// SetEndTime implements nodeapi.Service.
func (c *Client) SetEndTime(ctx context.Context, id string, endAt time.Time) error {
	_, err := c.rpc.SetEndTime(ctx, connect.NewRequest(&nodepb.SetEndTimeRequest{Id: id, EndAt: noderpc.Timestamp(endAt)}))
	return noderpc.FromConnectError(err)
}

// UpdateNetwork implements nodeapi.Service.
func (c *Client) UpdateNetwork(ctx context.Context, id string, policy sandbox.NetworkPolicy) error {
	_, err := c.rpc.UpdateNetwork(ctx, connect.NewRequest(&nodepb.UpdateNetworkRequest{Id: id, Network: noderpc.PolicyToProto(policy)}))
	return noderpc.FromConnectError(err)
}

// Pause implements nodeapi.Service.
func (c *Client) Pause(ctx context.Context, id string, req nodeapi.PauseRequest) (*nodeapi.Sandbox, error) {
	resp, err := c.rpc.Pause(ctx, connect.NewRequest(&nodepb.PauseRequest{Id: id, Memory: req.Memory, ExecutionId: req.ExecutionID}))
	if err != nil {
		return nil, noderpc.FromConnectError(err)
	}
	return noderpc.SandboxFromProto(resp.Msg.GetSandbox())
}

// Resume implements nodeapi.Service.
func (c *Client) Resume(ctx context.Context, id string, req nodeapi.ResumeRequest) (*nodeapi.Sandbox, error) {
	resp, err := c.rpc.Resume(ctx, connect.NewRequest(&nodepb.ResumeRequest{Id: id, ExecutionId: req.ExecutionID, EndAt: noderpc.Timestamp(req.EndAt)}))
	if err != nil {
		return nil, noderpc.FromConnectError(err)
	}
	return noderpc.SandboxFromProto(resp.Msg.GetSandbox())
}

// Fork implements nodeapi.Service.
func (c *Client) Fork(ctx context.Context, id string, req nodeapi.ForkRequest) ([]*nodeapi.Sandbox, error) {
	resp, err := c.rpc.Fork(ctx, connect.NewRequest(&nodepb.ForkRequest{
		Id: id, Ids: req.IDs, ExecutionIds: req.ExecutionIDs, EndAt: noderpc.Timestamp(req.EndAt),
		EnvdAccessTokens: req.EnvdAccessTokens,
	}))
	if err != nil {
		return nil, noderpc.FromConnectError(err)
	}
	return sandboxes(resp.Msg.GetSandboxes())
}

// Kill implements nodeapi.Service.
func (c *Client) Kill(ctx context.Context, id string, reason sandbox.KillReason) error {
	return c.KillExecution(ctx, id, "", reason)
}

// KillExecution implements nodeapi.ExecutionKiller: the node refuses the kill
// (conflict) when the sandbox's current execution is not executionID.
func (c *Client) KillExecution(ctx context.Context, id, executionID string, reason sandbox.KillReason) error {
	_, err := c.rpc.Kill(ctx, connect.NewRequest(&nodepb.KillRequest{Id: id, Reason: string(reason), ExecutionId: executionID}))
	return noderpc.FromConnectError(err)
}

var _ nodeapi.ExecutionKiller = (*Client)(nil)

// Stats implements nodeapi.Service.
func (c *Client) Stats(ctx context.Context, id string) (*nodeapi.Stats, error) {
	resp, err := c.rpc.Stats(ctx, connect.NewRequest(&nodepb.StatsRequest{Id: id}))
	if err != nil {
		return nil, noderpc.FromConnectError(err)
	}
	return noderpc.StatsFromProto(resp.Msg), nil
}

var _ nodeapi.MetricsSource = (*Client)(nil)

// Metrics implements nodeapi.MetricsSource; a node that keeps no samples
// answers ErrUnsupported.
func (c *Client) Metrics(ctx context.Context, id string, start, end time.Time) ([]nodeapi.Stats, error) {
	resp, err := c.rpc.Metrics(ctx, connect.NewRequest(&nodepb.MetricsRequest{
		Id: id, Start: noderpc.Timestamp(start), End: noderpc.Timestamp(end),
	}))
	if err != nil {
		return nil, noderpc.FromConnectError(err)
	}
	out := make([]nodeapi.Stats, 0, len(resp.Msg.GetSamples()))
	for _, s := range resp.Msg.GetSamples() {
		out = append(out, *noderpc.StatsFromProto(s))
	}
	return out, nil
}

// Watch implements nodeapi.Service. It returns once the node has accepted the
// watch. When the stream breaks (the node restarted, the network failed) it
// watches again, with backoff, until ctx ends; the node keeps the events of
// the meantime for its next watcher. The channel closes when ctx ends.
func (c *Client) Watch(ctx context.Context) (<-chan nodeapi.Event, error) {
	stream, err := c.watch(ctx)
	if err != nil {
		return nil, err
	}
	ch := make(chan nodeapi.Event, 64)
	go func() {
		defer close(ch)
		backoff := 100 * time.Millisecond
		for {
			for stream.Receive() {
				backoff = 100 * time.Millisecond
				select {
				case ch <- noderpc.EventFromProto(stream.Msg()):
				case <-ctx.Done():
					stream.Close()
					return
				}
			}
			stream.Close()
			for {
				t := time.NewTimer(backoff)
				select {
				case <-ctx.Done():
					t.Stop()
					return
				case <-t.C:
				}
				backoff = min(2*backoff, 5*time.Second)
				if stream, err = c.watch(ctx); err == nil {
					break
				}
			}
		}
	}()
	return ch, nil
}

// watch opens a watch stream and waits for the node to confirm it (an
// empty event).
func (c *Client) watch(ctx context.Context) (*connect.ServerStreamForClient[nodepb.Event], error) {
	stream, err := c.rpc.Watch(ctx, connect.NewRequest(&nodepb.WatchRequest{}))
	if err != nil {
		return nil, noderpc.FromConnectError(err)
	}
	if !stream.Receive() {
		err := stream.Err()
		stream.Close()
		if err == nil {
			return nil, fmt.Errorf("node closed the watch: %w", errdefs.ErrUnavailable)
		}
		return nil, noderpc.FromConnectError(err)
	}
	return stream, nil
}

// Capabilities implements nodeapi.Service.
func (c *Client) Capabilities(ctx context.Context) (nodeapi.Capabilities, error) {
	resp, err := c.rpc.Capabilities(ctx, connect.NewRequest(&nodepb.CapabilitiesRequest{}))
	if err != nil {
		return nodeapi.Capabilities{}, noderpc.FromConnectError(err)
	}
	m := resp.Msg
	return nodeapi.Capabilities{Driver: m.GetDriver(), MemoryCheckpoint: m.GetMemoryCheckpoint(), Freeze: m.GetFreeze(), Fork: m.GetFork()}, nil
}

// bearerInterceptor adds the node's credential to every call; a call
// without one (the node has no good token) is not sent.
type bearerInterceptor struct {
	cred func(ctx context.Context) (string, error)
}

func (b *bearerInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		v, err := b.cred(ctx)
		if err != nil {
			return nil, connect.NewError(connect.CodeUnavailable, err)
		}
		if v != "" {
			req.Header().Set("Authorization", "Bearer "+v)
		}
		return next(ctx, req)
	}
}

func (b *bearerInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		v, err := b.cred(ctx)
		if err != nil {
			return &failedConn{StreamingClientConn: conn, err: connect.NewError(connect.CodeUnavailable, err)}
		}
		if v != "" {
			conn.RequestHeader().Set("Authorization", "Bearer "+v)
		}
		return conn
	}
}

// failedConn is a stream that is not opened: its first send or receive
// fails with err.
type failedConn struct {
	connect.StreamingClientConn
	err error
}

func (f *failedConn) Send(any) error       { return f.err }
func (f *failedConn) Receive(any) error    { return f.err }
func (f *failedConn) CloseRequest() error  { return nil }
func (f *failedConn) CloseResponse() error { return nil }

func (b *bearerInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}
