package nodebuild

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"connectrpc.com/connect"

	nodepb "github.com/warren-sandbox/warren/api/node"
	"github.com/warren-sandbox/warren/api/node/nodepbconnect"
	"github.com/warren-sandbox/warren/internal/builder"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/errdefs/errconnect"
	"github.com/warren-sandbox/warren/internal/nodeauth"
	"github.com/warren-sandbox/warren/internal/templates"
)

// The node's side of the build wire: the BuildService of
// api/node/build.proto, on the node's RPC listener.

// Handler returns the path prefix and the handler of the node's
// BuildService: every call to the control plane (its credential),
// PullArtifact also to a peer with a pull grant for the build it names.
func (n *Node) Handler() (string, http.Handler) {
	return nodepbconnect.NewBuildServiceHandler(&buildServer{n: n}, handlerOptions(&nodeAuth{n: n})...)
}

// open reports whether the node asks nothing (no token: loopback only).
func (n *Node) open() bool { return n.cfg.Credential == "" && n.cfg.PullKey == "" }

// controlPlane reports whether h carries the control plane's credential
// of this node (any caller, on an open node).
func (n *Node) controlPlane(h http.Header) bool {
	return n.open() || nodeauth.Equal(nodeauth.Bearer(h), n.cfg.Credential)
}

// nodeAuth holds every BuildService call but PullArtifact to the control
// plane's credential; PullArtifact checks its caller itself, once it
// knows the build the call names (buildServer.puller).
type nodeAuth struct{ n *Node }

func (a *nodeAuth) check(procedure string, h http.Header, peer string) error {
	if procedure == nodepbconnect.BuildServicePullArtifactProcedure || a.n.controlPlane(h) {
		return nil
	}
	a.n.log.Warn("build wire call refused: not the control plane's credential", "procedure", procedure, "remote_addr", peer)
	return errconnect.New(errdefs.ErrUnauthorized, "unauthorized")
}

func (a *nodeAuth) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if err := a.check(req.Spec().Procedure, req.Header(), req.Peer().Addr); err != nil {
			return nil, err
		}
		return next(ctx, req)
	}
}

func (a *nodeAuth) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (a *nodeAuth) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		if err := a.check(conn.Spec().Procedure, conn.RequestHeader(), conn.Peer().Addr); err != nil {
			return err
		}
		return next(ctx, conn)
	}
}

// buildServer is the node's BuildService.
type buildServer struct{ n *Node }

var _ nodepbconnect.BuildServiceHandler = (*buildServer)(nil)

// fail maps err for the wire, logged here: the control plane sees its
// class and, if it has one, its message for a client.
func (s *buildServer) fail(procedure string, err error) error {
	s.n.log.Info("build wire call failed", "procedure", procedure, "code", errconnect.Code(err).String(), "error", err)
	return rpcError(err)
}

func (s *buildServer) StartBuild(ctx context.Context, req *connect.Request[nodepb.StartBuildRequest]) (*connect.Response[nodepb.StartBuildResponse], error) {
	if err := s.n.start(ctx, req.Msg); err != nil {
		return nil, s.fail("StartBuild", fmt.Errorf("start build: %w", err))
	}
	return connect.NewResponse(&nodepb.StartBuildResponse{}), nil
}

// start mirrors the waiting build of req and starts it.
func (n *Node) start(ctx context.Context, req *nodepb.StartBuildRequest) error {
	b, t := BuildRecord(req.GetBuild()), TemplateRecord(req.GetTemplate())
	if b.Status != templates.BuildWaiting {
		return fmt.Errorf("build %q is %s, not waiting: %w", b.ID, b.Status, errdefs.ErrConflict)
	}
	if err := n.cfg.Catalog.Mirror(ctx, t, b); err != nil {
		return err
	}
	spec := SpecOf(req.GetSpec())
	spec.RegistryAuth = AuthOf(req.GetRegistryAuth())
	if from := req.GetFrom(); from != nil {
		ref, err := n.parent(ctx, t.TeamID, from)
		if err != nil {
			return err
		}
		spec.FromTemplate = ref
	}
	_, err := n.cfg.Service.StartBuild(ctx, builder.StartRequest{TeamID: t.TeamID, TemplateID: t.ID, BuildID: b.ID, Spec: spec})
	return err
}

func (s *buildServer) BuildStatus(ctx context.Context, req *connect.Request[nodepb.BuildStatusRequest]) (*connect.Response[nodepb.BuildStatusResponse], error) {
	st, err := s.n.status(ctx, req.Msg.GetBuildId(), req.Msg.GetLogsOffset())
	if err != nil {
		return nil, s.fail("BuildStatus", err)
	}
	return connect.NewResponse(st), nil
}

// status is build id as this node records it, its artifacts written
// first when it is ready, with its log from offset.
func (n *Node) status(ctx context.Context, id string, offset int64) (*nodepb.BuildStatusResponse, error) {
	if err := templates.CheckID("build", id); err != nil {
		return nil, err
	}
	b, err := n.cfg.Catalog.Build(ctx, id)
	if err != nil {
		return nil, err
	}
	if b.Status == templates.BuildReady {
		if b, err = n.Export(ctx, id); err != nil {
			return nil, err
		}
	}
	logs, err := n.cfg.Catalog.Store().Logs(ctx, id, int(max(offset, 0)))
	if err != nil {
		return nil, err
	}
	return &nodepb.BuildStatusResponse{Build: BuildToProto(b), Logs: logsToProto(logs)}, nil
}

// CheckFiles mirrors the request's template and answers whether the
// build context hash of it is here (the team's upload quota checked, as
// builder.Service.Files does).
func (s *buildServer) CheckFiles(ctx context.Context, req *connect.Request[nodepb.CheckFilesRequest]) (*connect.Response[nodepb.CheckFilesResponse], error) {
	t := TemplateRecord(req.Msg.GetTemplate())
	if err := s.n.cfg.Catalog.MirrorTemplate(ctx, t); err != nil {
		return nil, s.fail("CheckFiles", err)
	}
	present, _, err := s.n.cfg.Service.Files(ctx, t.TeamID, t.ID, req.Msg.GetHash())
	if err != nil {
		return nil, s.fail("CheckFiles", err)
	}
	return connect.NewResponse(&nodepb.CheckFilesResponse{Present: present}), nil
}

// MaxUploadBytes bounds one build context a node takes (as
// builder.ServiceConfig's default).
const MaxUploadBytes = 4 << 30

// PutFiles stores a build context of a template CheckFiles mirrored.
func (s *buildServer) PutFiles(ctx context.Context, stream *connect.ClientStream[nodepb.PutFilesChunk]) (*connect.Response[nodepb.PutFilesResponse], error) {
	if !stream.Receive() {
		err := stream.Err()
		if err == nil {
			err = fmt.Errorf("files: no first message: %w", errdefs.ErrInvalid)
		}
		return nil, s.fail("PutFiles", err)
	}
	first := stream.Msg()
	if err := known(first); err != nil {
		return nil, s.fail("PutFiles", err)
	}
	r := &filesReader{stream: stream, data: first.GetData(), end: first.GetEnd(), left: MaxUploadBytes}
	if err := s.n.cfg.Service.PutFiles(ctx, first.GetTemplateId(), first.GetHash(), r); err != nil {
		if errors.Is(err, errUploadTooLarge) {
			err = errdefs.Publicf(errdefs.ErrInvalid, "upload larger than %d bytes", int64(MaxUploadBytes))
		}
		return nil, s.fail("PutFiles", err)
	}
	return connect.NewResponse(&nodepb.PutFilesResponse{}), nil
}

var errUploadTooLarge = errors.New("upload too large")

// filesReader reads the data of a PutFiles stream up to its end mark, at
// most left bytes: a stream that ends without the mark was cut (a
// cancelled upload ends cleanly on the wire), and nothing is stored.
type filesReader struct {
	stream *connect.ClientStream[nodepb.PutFilesChunk]
	data   []byte
	end    bool
	left   int64
}

func (f *filesReader) Read(b []byte) (int, error) {
	for len(f.data) == 0 {
		if f.end {
			return 0, io.EOF
		}
		if !f.stream.Receive() {
			if err := f.stream.Err(); err != nil {
				return 0, err
			}
			return 0, fmt.Errorf("upload ended before its last chunk: %w", io.ErrUnexpectedEOF)
		}
		if err := known(f.stream.Msg()); err != nil {
			return 0, err
		}
		f.data, f.end = f.stream.Msg().GetData(), f.stream.Msg().GetEnd()
	}
	if int64(len(f.data)) > f.left {
		return 0, errUploadTooLarge
	}
	n := copy(b, f.data)
	f.data, f.left = f.data[n:], f.left-int64(n)
	return n, nil
}

// PullArtifact streams an artifact of the build the request names, to
// the control plane and to a peer with a pull grant for that build.
func (s *buildServer) PullArtifact(ctx context.Context, req *connect.Request[nodepb.PullArtifactRequest], stream *connect.ServerStream[nodepb.ArtifactChunk]) error {
	id := req.Msg.GetBuildId()
	if err := known(req.Msg); err != nil {
		return s.fail("PullArtifact", err)
	}
	if err := s.puller(id, req.Header(), req.Peer().Addr); err != nil {
		return err
	}
	if err := templates.CheckID("build", id); err != nil {
		return s.fail("PullArtifact", err)
	}
	b, err := s.n.Export(ctx, id)
	if err != nil {
		return s.fail("PullArtifact", err)
	}
	path, d, err := s.n.artifact(b, req.Msg.GetKind())
	if err != nil {
		return s.fail("PullArtifact", err)
	}
	f, err := os.Open(path)
	if err != nil {
		return s.fail("PullArtifact", fmt.Errorf("build %q %s: %w: %w", id, req.Msg.GetKind(), errdefs.ErrUnavailable, err))
	}
	defer f.Close()
	if err := stream.Send(&nodepb.ArtifactChunk{Artifact: &nodepb.Artifact{Sha256: d.SHA256, Size: d.Size}}); err != nil {
		return err
	}
	buf := make([]byte, chunkSize)
	for {
		k, rerr := f.Read(buf)
		if k > 0 {
			if err := stream.Send(&nodepb.ArtifactChunk{Data: buf[:k]}); err != nil {
				s.n.log.Info("artifact stream ended early", "artifact", req.Msg.GetKind().String(), "build_id", id, "error", err)
				return err
			}
		}
		if errors.Is(rerr, io.EOF) {
			return nil
		}
		if rerr != nil {
			return s.fail("PullArtifact", fmt.Errorf("build %q %s: %w", id, req.Msg.GetKind(), rerr))
		}
	}
}

// puller lets the control plane pull any artifact of this node, and a
// peer one of build id when its pull grant (nodeauth.HeaderGrant, made
// with this node's pull key) names that build.
func (s *buildServer) puller(id string, h http.Header, addr string) error {
	if s.n.controlPlane(h) {
		return nil
	}
	peer, err := nodeauth.CheckGrant(s.n.cfg.PullKey, id, h.Get(nodeauth.HeaderGrant), time.Now())
	if err != nil {
		s.n.log.Warn("artifact pull refused", "build_id", id, "remote_addr", addr, "error", err)
		return errconnect.New(errdefs.ErrUnauthorized, "unauthorized")
	}
	s.n.log.Info("artifact pull", "build_id", id, "peer_node_id", peer)
	return nil
}

// artifact is the file and digest of build b's artifact kind, as this
// node exported it.
func (n *Node) artifact(b *templates.Build, kind nodepb.ArtifactKind) (string, Digest, error) {
	switch kind {
	case nodepb.ArtifactKind_ARTIFACT_KIND_ROOTFS:
		return n.artifactPath(b.ID), Digest{SHA256: b.RootFSSHA256, Size: b.RootFSSize}, nil
	case nodepb.ArtifactKind_ARTIFACT_KIND_SNAPSHOT:
		if b.SnapshotSHA256 == "" {
			return "", Digest{}, fmt.Errorf("build %q has no snapshot that travels: %w", b.ID, errdefs.ErrNotFound)
		}
		return n.snapshotArtifactPath(b.ID), Digest{SHA256: b.SnapshotSHA256, Size: b.SnapshotSize}, nil
	}
	return "", Digest{}, errdefs.Publicf(errdefs.ErrInvalid, "no artifact of kind %s", kind)
}
