package noderpc

import (
	"context"
	"crypto/subtle"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"connectrpc.com/connect"

	nodepb "github.com/warren-sandbox/warren/api/node"
	"github.com/warren-sandbox/warren/api/node/nodepbconnect"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/sandbox"
)

// Options tune the server.
type Options struct {
	// Token, when set, is required as "Authorization: Bearer <token>" on
	// every call: the control plane's credential of this node
	// (nodeauth.Credential(node token, PurposeRPC)), no other node's.
	Token string
	// MetricsToken, when set, opens GET /metrics (NewMux) besides Token:
	// the scrapers' credential (nodeauth.PurposeMetrics).
	MetricsToken string
	Logger       *slog.Logger
	// NodeProxy, when set, is the address (host:port) of this node's proxy
	// listener as the edge proxy reaches it; every sandbox the server
	// returns carries it (nodeapi.Sandbox.NodeProxy).
	NodeProxy string
	// ResolveTemplate resolves the template a create, a pool or a
	// reservation names (its ID and build ID) to this node's own copy: no
	// path crosses the wire (a request naming a root filesystem or a
	// snapshot directory is refused), so a node without it starts
	// nothing. The node's catalog pulls a build it lacks first.
	ResolveTemplate func(ctx context.Context, teamID string, t nodeapi.Template) (nodeapi.Template, error)
	// SandboxSnapshots, when set, takes the sandbox snapshots
	// (TakeSandboxSnapshot, DeleteSandboxSnapshot): the agent's are kept
	// in the node's catalog (internal/nodebuild.SandboxSnapshots). Nil:
	// the served Service's own, if it has them.
	SandboxSnapshots nodeapi.SandboxSnapshotter
	// Volumes, when set, serves the volume calls (the node's
	// internal/node/volumes.Manager); nil: the served Service's own, if
	// it has them.
	Volumes nodeapi.VolumeService
}

// NewHandler returns the path prefix and the HTTP handler that serve svc
// as the NodeService.
func NewHandler(svc nodeapi.Service, opts Options) (string, http.Handler) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &server{svc: svc, log: log, nodeProxy: opts.NodeProxy, resolve: opts.ResolveTemplate,
		snaps: opts.SandboxSnapshots, vols: opts.Volumes}
	if s.snaps == nil {
		s.snaps, _ = svc.(nodeapi.SandboxSnapshotter)
	}
	if s.vols == nil {
		s.vols, _ = svc.(nodeapi.VolumeService)
	}
	var hopts []connect.HandlerOption
	if opts.Token != "" {
		hopts = append(hopts, connect.WithInterceptors(tokenInterceptor(opts.Token)))
	}
	return nodepbconnect.NewNodeServiceHandler(s, hopts...)
}

type server struct {
	svc       nodeapi.Service
	log       *slog.Logger
	nodeProxy string
	resolve   func(ctx context.Context, teamID string, t nodeapi.Template) (nodeapi.Template, error)
	snaps     nodeapi.SandboxSnapshotter // nil: none
	vols      nodeapi.VolumeService      // nil: none
}

// template resolves the template p names for team to this node's own
// copy. A request that names files (a root filesystem, a snapshot
// directory) is ErrInvalid: paths on the node are the node's to know.
func (s *server) template(ctx context.Context, teamID string, p *nodepb.Template) (nodeapi.Template, error) {
	if p.GetRootfs() != "" || p.GetSnapshotDir() != "" {
		return nodeapi.Template{}, fmt.Errorf("template %q: a root filesystem or snapshot directory does not cross the wire (the node resolves the build itself): %w",
			p.GetId(), errdefs.ErrInvalid)
	}
	if p.GetId() == "" {
		return nodeapi.Template{}, fmt.Errorf("no template named: %w", errdefs.ErrInvalid)
	}
	if s.resolve == nil {
		return nodeapi.Template{}, fmt.Errorf("template %q: this node resolves no templates: %w", p.GetId(), errdefs.ErrUnsupported)
	}
	return s.resolve(ctx, teamID, nodeapi.Template{ID: p.GetId(), BuildID: p.GetBuildId()})
}

// sandbox converts sb for the wire, naming this node's proxy listener.
func (s *server) sandbox(sb *nodeapi.Sandbox) *nodepb.Sandbox {
	p := SandboxToProto(sb)
	if p != nil && s.nodeProxy != "" {
		p.NodeProxy = s.nodeProxy
	}
	return p
}

var _ nodepbconnect.NodeServiceHandler = (*server)(nil)

// fail maps err for the wire; errors of no class are logged here, since
// the control plane only sees their message.
func (s *server) fail(procedure string, err error) error {
	ce := ToConnectError(err)
	if connect.CodeOf(ce) == connect.CodeInternal {
		s.log.Error("node rpc failed", "procedure", procedure, "error", err)
	}
	return ce
}

func (s *server) Create(ctx context.Context, req *connect.Request[nodepb.CreateRequest]) (*connect.Response[nodepb.SandboxResponse], error) {
	cr, err := CreateFromProto(req.Msg)
	if err != nil {
		return nil, s.fail("Create", err)
	}
	if cr.Template, err = s.template(ctx, cr.TeamID, req.Msg.GetTemplate()); err != nil {
		return nil, s.fail("Create", err)
	}
	sb, err := s.svc.Create(ctx, cr)
	if err != nil {
		return nil, s.fail("Create", err)
	}
	return connect.NewResponse(&nodepb.SandboxResponse{Sandbox: s.sandbox(sb)}), nil
}

func (s *server) Get(ctx context.Context, req *connect.Request[nodepb.GetRequest]) (*connect.Response[nodepb.SandboxResponse], error) {
	sb, err := s.svc.Get(ctx, req.Msg.GetId())
	if err != nil {
		return nil, s.fail("Get", err)
	}
	return connect.NewResponse(&nodepb.SandboxResponse{Sandbox: s.sandbox(sb)}), nil
}

func (s *server) List(ctx context.Context, req *connect.Request[nodepb.ListRequest]) (*connect.Response[nodepb.ListResponse], error) {
	list, err := s.svc.List(ctx)
	if err != nil {
		return nil, s.fail("List", err)
	}
	out := &nodepb.ListResponse{}
	for _, sb := range list {
		out.Sandboxes = append(out.Sandboxes, s.sandbox(sb))
	}
	return connect.NewResponse(out), nil
}

func (s *server) SetEndTime(ctx context.Context, req *connect.Request[nodepb.SetEndTimeRequest]) (*connect.Response[nodepb.SetEndTimeResponse], error) {
	if err := s.svc.SetEndTime(ctx, req.Msg.GetId(), Time(req.Msg.GetEndAt())); err != nil {
		return nil, s.fail("SetEndTime", err)
	}
	return connect.NewResponse(&nodepb.SetEndTimeResponse{}), nil
}

func (s *server) UpdateNetwork(ctx context.Context, req *connect.Request[nodepb.UpdateNetworkRequest]) (*connect.Response[nodepb.UpdateNetworkResponse], error) {
	pol, err := PolicyFromProto(req.Msg.GetNetwork())
	if err != nil {
		return nil, s.fail("UpdateNetwork", err)
	}
	if err := s.svc.UpdateNetwork(ctx, req.Msg.GetId(), pol); err != nil {
		return nil, s.fail("UpdateNetwork", err)
	}
	return connect.NewResponse(&nodepb.UpdateNetworkResponse{}), nil
}

func (s *server) Pause(ctx context.Context, req *connect.Request[nodepb.PauseRequest]) (*connect.Response[nodepb.SandboxResponse], error) {
	sb, err := s.svc.Pause(ctx, req.Msg.GetId(), nodeapi.PauseRequest{Memory: req.Msg.GetMemory(), ExecutionID: req.Msg.GetExecutionId()})
	if err != nil {
		return nil, s.fail("Pause", err)
	}
	return connect.NewResponse(&nodepb.SandboxResponse{Sandbox: s.sandbox(sb)}), nil
}

func (s *server) Resume(ctx context.Context, req *connect.Request[nodepb.ResumeRequest]) (*connect.Response[nodepb.SandboxResponse], error) {
	sb, err := s.svc.Resume(ctx, req.Msg.GetId(), nodeapi.ResumeRequest{ExecutionID: req.Msg.GetExecutionId(), EndAt: Time(req.Msg.GetEndAt())})
	if err != nil {
		return nil, s.fail("Resume", err)
	}
	return connect.NewResponse(&nodepb.SandboxResponse{Sandbox: s.sandbox(sb)}), nil
}

func (s *server) Fork(ctx context.Context, req *connect.Request[nodepb.ForkRequest]) (*connect.Response[nodepb.ForkResponse], error) {
	list, err := s.svc.Fork(ctx, req.Msg.GetId(), nodeapi.ForkRequest{
		IDs: req.Msg.GetIds(), ExecutionIDs: req.Msg.GetExecutionIds(), EndAt: Time(req.Msg.GetEndAt()),
		EnvdAccessTokens: req.Msg.GetEnvdAccessTokens(),
	})
	if err != nil {
		return nil, s.fail("Fork", err)
	}
	out := &nodepb.ForkResponse{}
	for _, sb := range list {
		out.Sandboxes = append(out.Sandboxes, s.sandbox(sb))
	}
	return connect.NewResponse(out), nil
}

func (s *server) Kill(ctx context.Context, req *connect.Request[nodepb.KillRequest]) (*connect.Response[nodepb.KillResponse], error) {
	id, reason := req.Msg.GetId(), sandbox.KillReason(req.Msg.GetReason())
	var err error
	if ek, ok := s.svc.(nodeapi.ExecutionKiller); ok && req.Msg.GetExecutionId() != "" {
		err = ek.KillExecution(ctx, id, req.Msg.GetExecutionId(), reason)
	} else {
		err = s.svc.Kill(ctx, id, reason)
	}
	if err != nil {
		return nil, s.fail("Kill", err)
	}
	return connect.NewResponse(&nodepb.KillResponse{}), nil
}

func (s *server) Stats(ctx context.Context, req *connect.Request[nodepb.StatsRequest]) (*connect.Response[nodepb.StatsResponse], error) {
	st, err := s.svc.Stats(ctx, req.Msg.GetId())
	if err != nil {
		return nil, s.fail("Stats", err)
	}
	return connect.NewResponse(StatsToProto(st)), nil
}

func (s *server) Metrics(ctx context.Context, req *connect.Request[nodepb.MetricsRequest]) (*connect.Response[nodepb.MetricsResponse], error) {
	src, ok := s.svc.(nodeapi.MetricsSource)
	if !ok {
		return nil, s.fail("Metrics", fmt.Errorf("sandbox metrics: %w", errdefs.ErrUnsupported))
	}
	out, err := src.Metrics(ctx, req.Msg.GetId(), Time(req.Msg.GetStart()), Time(req.Msg.GetEnd()))
	if err != nil {
		return nil, s.fail("Metrics", err)
	}
	resp := &nodepb.MetricsResponse{Samples: make([]*nodepb.StatsResponse, 0, len(out))}
	for i := range out {
		resp.Samples = append(resp.Samples, StatsToProto(&out[i]))
	}
	return connect.NewResponse(resp), nil
}

func (s *server) Watch(ctx context.Context, req *connect.Request[nodepb.WatchRequest], stream *connect.ServerStream[nodepb.Event]) error {
	ch, err := s.svc.Watch(ctx)
	if err != nil {
		return s.fail("Watch", err)
	}
	// An empty event first tells the client the watch is in place.
	if err := stream.Send(&nodepb.Event{}); err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-ch:
			if !ok {
				return connect.NewError(connect.CodeUnavailable, errdefs.ErrUnavailable)
			}
			if err := stream.Send(EventToProto(ev)); err != nil {
				return err
			}
		}
	}
}

func (s *server) Capabilities(ctx context.Context, req *connect.Request[nodepb.CapabilitiesRequest]) (*connect.Response[nodepb.CapabilitiesResponse], error) {
	c, err := s.svc.Capabilities(ctx)
	if err != nil {
		return nil, s.fail("Capabilities", err)
	}
	return connect.NewResponse(&nodepb.CapabilitiesResponse{
		Driver: c.Driver, MemoryCheckpoint: c.MemoryCheckpoint, Freeze: c.Freeze, Fork: c.Fork,
	}), nil
}

// tokenInterceptor requires the shared bearer token on every call.
func tokenInterceptor(token string) connect.Interceptor {
	check := func(h http.Header) error {
		got, ok := strings.CutPrefix(h.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(token)) != 1 {
			return connect.NewError(connect.CodeUnauthenticated, errdefs.ErrUnauthorized)
		}
		return nil
	}
	return &authInterceptor{check: check}
}

type authInterceptor struct {
	check func(http.Header) error
}

func (a *authInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if err := a.check(req.Header()); err != nil {
			return nil, err
		}
		return next(ctx, req)
	}
}

func (a *authInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (a *authInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		if err := a.check(conn.RequestHeader()); err != nil {
			return err
		}
		return next(ctx, conn)
	}
}
