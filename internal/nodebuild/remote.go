package nodebuild

import (
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	nodepb "github.com/warren-sandbox/warren/api/node"
	"github.com/warren-sandbox/warren/api/node/nodepbconnect"
	"github.com/warren-sandbox/warren/internal/builder"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/errdefs/errhttp"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/nodeauth"
	"github.com/warren-sandbox/warren/internal/store"
	"github.com/warren-sandbox/warren/internal/templates"
)

// Nodes is what Remote reads of the node registry, and of the sandboxes
// placed on a node (what builds it needs).
type Nodes interface {
	ListNodes(ctx context.Context) ([]*store.Node, error)
	GetNode(ctx context.Context, id string) (*store.Node, error)
	ListSandboxes(ctx context.Context, f store.SandboxFilter) ([]*store.Sandbox, error)
}

// RemoteConfig configures a Remote.
type RemoteConfig struct {
	// Catalog is the control plane's catalog (over store.TemplateStore).
	Catalog *templates.Catalog
	Nodes   Nodes
	// Credential gives the credential of the calls to node nodeID
	// (nodereg.Credentials.Credential with nodeauth.PurposeRPC); nil: none
	// (loopback nodes without tokens).
	Credential func(ctx context.Context, nodeID string) (string, error)
	// Grant gives the leave for node requester to pull build buildID from
	// node holder (nodereg.Credentials.Grant); nil: none.
	Grant func(ctx context.Context, holder, buildID, requester string) (string, error)
	// Authenticate tells which node a call of the ControlPlaneService
	// (LocateHandler) comes from (nodereg.Credentials.Authenticate): ""
	// is any node (the insecure loopback mode). Without it every call is
	// refused.
	Authenticate func(r *http.Request) (string, error)
	// UploadKey signs the upload URLs of build contexts, so that any
	// replica takes them: the same on every replica (derived from the
	// node credential key). Empty: a key of this process.
	UploadKey string
	// HTTP carries the calls to nodes (default: nodeauth.Client(nil): no
	// proxy, no redirects).
	HTTP *http.Client
	// MaxTemplateDiskMB is the largest disk a template may ask for
	// (default 65536, as builder.ServiceConfig).
	MaxTemplateDiskMB int64
	// PollInterval is how often a started build's node is asked for its
	// progress (default 500 ms).
	PollInterval time.Duration
	Logger       *slog.Logger
}

// Remote is the build service of `warren api` (what the API server's
// template routes call, as builder.Service in `warren serve`): a build
// runs on one ready node, chosen by free capacity, and the replica that
// started it copies the node's progress and log into the shared catalog
// until the build ends; every replica, at its start, follows the builds
// it finds running on nodes (Resume), so a build outlives the replica
// that started it. Followers of one build append each batch of its log
// once (LogAppender).
type Remote struct {
	cfg    RemoteConfig
	cat    *templates.Catalog
	log    *slog.Logger
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// LogAppender is the catalog store's conditional append
// (store.TemplateStore): entries go at offset only if the log has that
// many, and the log's length is returned.
type LogAppender interface {
	AppendLogsAt(ctx context.Context, buildID string, offset int, entries ...templates.LogEntry) (int, error)
}

// NewRemote returns a Remote; Close it.
func NewRemote(cfg RemoteConfig) (*Remote, error) {
	if cfg.Catalog == nil || cfg.Nodes == nil {
		return nil, fmt.Errorf("nodebuild: a catalog and the nodes are required: %w", errdefs.ErrInvalid)
	}
	if _, ok := cfg.Catalog.Store().(LogAppender); !ok {
		return nil, fmt.Errorf("nodebuild: the catalog's store has no conditional log append (store.TemplateStore): %w", errdefs.ErrInvalid)
	}
	if cfg.HTTP == nil {
		cfg.HTTP = nodeauth.Client(nil)
	}
	if cfg.UploadKey == "" {
		cfg.UploadKey = nodeauth.NewTokenID() + nodeauth.NewTokenID()
	}
	if cfg.MaxTemplateDiskMB <= 0 {
		cfg.MaxTemplateDiskMB = 64 << 10
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = 500 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Remote{cfg: cfg, cat: cfg.Catalog, log: cfg.Logger, ctx: ctx, cancel: cancel}, nil
}

// Resume follows every build the catalog records as building on a node,
// as the replica that started it did.
func (r *Remote) Resume(ctx context.Context) error {
	all, err := r.cat.List(ctx, "")
	if err != nil {
		return err
	}
	for _, t := range all {
		builds, err := r.cat.Builds(ctx, t.ID)
		if err != nil {
			return err
		}
		for _, b := range builds {
			if b.Status == templates.BuildBuilding && b.NodeID != "" {
				r.log.Info("following a build on its node", "template_id", t.ID, "build_id", b.ID, "node_id", b.NodeID)
				r.wg.Go(func() { r.follow(b.ID, b.NodeID) })
			}
		}
	}
	return nil
}

// Close stops following builds (they go on on their nodes).
func (r *Remote) Close() {
	r.cancel()
	r.wg.Wait()
}

// CreateTemplate makes a waiting build (POST /v3/templates).
func (r *Remote) CreateTemplate(ctx context.Context, req templates.CreateRequest) (*templates.Template, *templates.Build, error) {
	if req.DiskMB > r.cfg.MaxTemplateDiskMB {
		return nil, nil, fmt.Errorf("disk size %d MiB (minFreeDiskMb) is more than this server allows for a template (%d MiB): %w", req.DiskMB, r.cfg.MaxTemplateDiskMB, errdefs.ErrInvalid)
	}
	return r.cat.CreateBuild(ctx, req)
}

// Files implements the upload check (GET /templates/{id}/files/{hash}).
// A template's build contexts go to the node its newest waiting build is
// pinned to (chosen now when it has none), where that build then runs:
// present when the node has the context, else the path of the API's
// signed upload URL (UploadHandler), which streams the PUT to that node.
func (r *Remote) Files(ctx context.Context, teamID, templateID, hash string) (bool, string, error) {
	t, err := r.owned(ctx, teamID, templateID)
	if err != nil {
		return false, "", err
	}
	if !validHash(hash) {
		return false, "", fmt.Errorf("files %q of template %q: bad name: %w", hash, templateID, errdefs.ErrInvalid)
	}
	n, err := r.uploadNode(ctx, t)
	if err != nil {
		return false, "", err
	}
	rpc, err := r.rpc(ctx, n)
	if err != nil {
		return false, "", err
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, err := rpc.CheckFiles(ctx, connect.NewRequest(&nodepb.CheckFilesRequest{Template: TemplateToProto(t), Hash: hash}))
	if err != nil {
		return false, "", nodeError(n, err)
	}
	if resp.Msg.GetPresent() {
		return true, "", nil
	}
	return false, builder.UploadPathPrefix + t.ID + "/" + hash + "?token=" + r.uploadToken(t.ID, hash), nil
}

func validHash(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// uploadToken signs an upload URL with a key every replica shares, so
// that the PUT may reach any replica.
func (r *Remote) uploadToken(templateID, hash string) string {
	k := hmac.New(sha256.New, []byte(r.cfg.UploadKey))
	k.Write([]byte("warren build upload v1"))
	m := hmac.New(sha256.New, k.Sum(nil))
	m.Write([]byte(templateID + "/" + hash))
	return hex.EncodeToString(m.Sum(nil))
}

// uploadNode returns the node the newest waiting build of t is pinned to,
// pinning it to the most free ready node first.
func (r *Remote) uploadNode(ctx context.Context, t *templates.Template) (*store.Node, error) {
	builds, err := r.cat.Builds(ctx, t.ID)
	if err != nil {
		return nil, err
	}
	var waiting *templates.Build
	for _, b := range builds {
		if b.Status == templates.BuildWaiting && (waiting == nil || !b.CreatedAt.Before(waiting.CreatedAt)) {
			waiting = b
		}
	}
	if waiting == nil {
		return nil, errdefs.Publicf(errdefs.ErrConflict, "template '%s' has no waiting build to upload files for: create one first (POST /v3/templates)", t.ID)
	}
	if waiting.NodeID == "" {
		nodes, err := r.buildNodes(ctx, waiting, "") // the spec, and its parent, come with the start
		if err != nil {
			return nil, err
		}
		// Of two replicas pinning at once, the first one's node stays.
		if waiting, err = r.cat.UpdateBuild(ctx, waiting.ID, func(b *templates.Build) error {
			if b.NodeID == "" {
				b.NodeID = nodes[0].ID
			}
			return nil
		}); err != nil {
			return nil, err
		}
	}
	n, err := r.cfg.Nodes.GetNode(ctx, waiting.NodeID)
	if err != nil {
		return nil, err
	}
	if !n.Schedulable() {
		return nil, errdefs.Publicf(errdefs.ErrUnavailable, "the node that holds this build's files (%s) is %s", n.ID, n.Status())
	}
	return n, nil
}

// UploadHandler takes the PUTs of build contexts at the paths Files hands
// out (mount it at builder.UploadPathPrefix, outside the API's key
// checks: the signed token is their authentication) and streams each to
// the node the template's waiting build is pinned to. Its errors are
// answered as builder.Service.UploadHandler answers them: a line of text,
// the status of errhttp's table, the message chosen where the error was
// made (the node's, the team's quota) else "upload failed".
func (r *Remote) UploadHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		err := r.upload(req)
		if err == nil {
			w.WriteHeader(http.StatusCreated)
			return
		}
		he := errhttp.From(err)
		for k, v := range he.Header {
			w.Header()[k] = v
		}
		http.Error(w, he.Msg, he.Code)
	})
}

// upload streams the body of an upload request to its node, or returns
// what its client is told.
func (r *Remote) upload(req *http.Request) error {
	if req.Method != http.MethodPut {
		return &errhttp.HTTPError{Code: http.StatusMethodNotAllowed, Msg: "method not allowed", Header: http.Header{"Allow": {http.MethodPut}}}
	}
	templateID, hash, ok := strings.Cut(strings.TrimPrefix(req.URL.Path, builder.UploadPathPrefix), "/")
	if !ok || !validHash(hash) || templates.CheckID("template", templateID) != nil ||
		!hmac.Equal([]byte(req.URL.Query().Get("token")), []byte(r.uploadToken(templateID, hash))) {
		return errhttp.Errorf(http.StatusForbidden, "invalid upload URL")
	}
	err := func() error {
		t, err := r.cat.Store().GetTemplate(req.Context(), templateID)
		if err != nil {
			return err
		}
		n, err := r.uploadNode(req.Context(), t)
		if err != nil {
			return err
		}
		return r.putFiles(req.Context(), n, templateID, hash, req.Body)
	}()
	if err == nil {
		return nil
	}
	r.log.Warn("file upload", "template_id", templateID, "hash", hash, "error", err)
	if _, public := errdefs.Message(err); !public {
		return errdefs.WithMessage(err, "upload failed")
	}
	return err
}

// putFiles streams build context hash of template templateID from body
// to node n (PutFiles): a body that fails before its end cuts the
// stream, and the node keeps nothing of it.
func (r *Remote) putFiles(ctx context.Context, n *store.Node, templateID, hash string, body io.Reader) error {
	rpc, err := r.rpc(ctx, n)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream := rpc.PutFiles(ctx)
	if err := stream.Send(&nodepb.PutFilesChunk{TemplateId: templateID, Hash: hash}); err != nil {
		_, err := stream.CloseAndReceive()
		return nodeError(n, err)
	}
	buf := make([]byte, chunkSize)
	for {
		k, rerr := body.Read(buf)
		if k > 0 {
			if err := stream.Send(&nodepb.PutFilesChunk{Data: buf[:k]}); err != nil {
				// The node answered already (it refused): its answer says why.
				_, err := stream.CloseAndReceive()
				return nodeError(n, err)
			}
		}
		if errors.Is(rerr, io.EOF) {
			// A refused end mark is the node's answer: CloseAndReceive reads it.
			stream.Send(&nodepb.PutFilesChunk{End: true})
			_, err := stream.CloseAndReceive()
			return nodeError(n, err)
		}
		if rerr != nil {
			// Cut the stream: the node sees a broken upload, not an end.
			cancel()
			stream.CloseAndReceive() // cancelled
			return fmt.Errorf("upload of files %s: %w", hash, rerr)
		}
	}
}

func (r *Remote) owned(ctx context.Context, teamID, templateID string) (*templates.Template, error) {
	return builder.OwnedTemplate(ctx, r.cat, teamID, templateID)
}

// StartBuild starts the waiting build req.BuildID on a node and returns
// its ID; the build's progress reaches the catalog as the node reports it.
func (r *Remote) StartBuild(ctx context.Context, req builder.StartRequest) (string, error) {
	t, bd, err := builder.WaitingBuild(ctx, r.cat, &req, r.CreateTemplate)
	if err != nil {
		return "", err
	}
	if err := builder.ValidateSteps(req.Spec.Steps); err != nil {
		return "", err
	}
	// The team's template storage over every node's builds (a node sees
	// its own only).
	if err := builder.CheckStorage(ctx, r.cat, req.TeamID, req.Spec.Team.StorageMB, 0); err != nil {
		return "", err
	}
	var nodes []*store.Node
	if bd.NodeID != "" {
		// Pinned by its uploads: it runs where its files are.
		n, err := r.cfg.Nodes.GetNode(ctx, bd.NodeID)
		if err != nil {
			return "", err
		}
		if !n.Schedulable() {
			return "", errdefs.Publicf(errdefs.ErrUnavailable, "the node that holds this build's files (%s) is %s", n.ID, n.Status())
		}
		nodes = []*store.Node{n}
	}
	from := r.parent(ctx, req.TeamID, req.Spec)
	if bd.NodeID == "" {
		parent := ""
		if from != nil {
			parent = from.GetBuildId()
		}
		if nodes, err = r.buildNodes(ctx, bd, parent); err != nil {
			return "", err
		}
	}
	pinned := bd.NodeID
	// The claim (waiting → building on a node) is one row update: of two
	// replicas starting one build, one gets it.
	waiting := *bd
	var refusals []error
	for _, n := range nodes {
		if _, err := r.cat.UpdateBuild(ctx, bd.ID, func(b *templates.Build) error {
			if b.Status != templates.BuildWaiting {
				return fmt.Errorf("build %q is %s, not waiting: %w", b.ID, b.Status, errdefs.ErrConflict)
			}
			b.Status, b.NodeID = templates.BuildBuilding, n.ID
			return nil
		}); err != nil {
			return "", err
		}
		fromN, err := r.fromFor(ctx, from, n.ID)
		if err == nil {
			err = r.startOn(ctx, n, &nodepb.StartBuildRequest{Template: TemplateToProto(t), Build: BuildToProto(&waiting), Spec: SpecToProto(req.Spec),
				RegistryAuth: AuthToProto(req.Spec.RegistryAuth), From: fromN})
		}
		if err == nil {
			r.log.Info("build started on a node", "template_id", t.ID, "build_id", bd.ID, "node_id", n.ID)
			r.wg.Go(func() { r.follow(bd.ID, n.ID) })
			return bd.ID, nil
		}
		r.log.Warn("node refused a build", "build_id", bd.ID, "node_id", n.ID, "error", err)
		refusals = append(refusals, fmt.Errorf("node %q: %w", n.ID, err))
		if _, uerr := r.cat.UpdateBuild(context.WithoutCancel(ctx), bd.ID, func(b *templates.Build) error {
			b.Status, b.NodeID = templates.BuildWaiting, pinned
			return nil
		}); uerr != nil {
			return "", uerr
		}
		if !errdefs.IsUnavailable(err) {
			// The build's own fault (a bad step, files not uploaded) or its
			// team's (a quota the node keeps): no other node does better.
			return "", err
		}
	}
	return "", fmt.Errorf("build %q: every node refused it: %w: %w", bd.ID, errdefs.ErrUnavailable, errors.Join(refusals...))
}

// startOn asks node n to run the build of req.
func (r *Remote) startOn(ctx context.Context, n *store.Node, req *nodepb.StartBuildRequest) error {
	rpc, err := r.rpc(ctx, n)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	if _, err := rpc.StartBuild(ctx, connect.NewRequest(req)); err != nil {
		return nodeError(n, err)
	}
	return nil
}

// parent is the build of the catalog that spec's FromTemplate names for
// team, which the node is to get before it builds; nil for none, for
// base (each node's own) and for a name that does not resolve (the
// node's builder fails the build saying so, as in serve).
func (r *Remote) parent(ctx context.Context, teamID string, spec builder.Spec) *nodepb.ParentBuild {
	if spec.FromTemplate == "" || spec.FromImage != "" {
		return nil
	}
	t, b, err := r.cat.Lookup(ctx, teamID, spec.FromTemplate)
	if err != nil || b.ID == t.ID {
		return nil
	}
	return &nodepb.ParentBuild{TemplateId: t.ID, BuildId: b.ID}
}

// fromFor is from for node nodeID, with where it can pull the parent and
// the leave to (a node needs the parent of the build it runs).
func (r *Remote) fromFor(ctx context.Context, from *nodepb.ParentBuild, nodeID string) (*nodepb.ParentBuild, error) {
	if from == nil {
		return nil, nil
	}
	src, err := r.source(ctx, from.GetBuildId(), nodeID)
	if err != nil {
		return nil, fmt.Errorf("parent build %s: %w", from.GetBuildId(), err)
	}
	return &nodepb.ParentBuild{TemplateId: from.GetTemplateId(), BuildId: from.GetBuildId(), Source: src}, nil
}

// buildNodes returns the ready nodes a build may run on: those with room
// for its vCPUs and memory beside what placement reserved there first,
// of them those that hold the build's parent (when it has one, parent:
// they need not pull it) first, then the others, each most free memory
// first. (A build's sandboxes are the node's own: placement reserves
// nothing for them.)
func (r *Remote) buildNodes(ctx context.Context, b *templates.Build, parent string) ([]*store.Node, error) {
	all, err := r.cfg.Nodes.ListNodes(ctx)
	if err != nil {
		return nil, err
	}
	nodes := slices.DeleteFunc(all, func(n *store.Node) bool { return !n.Schedulable() })
	if len(nodes) == 0 {
		return nil, errdefs.Publicf(errdefs.ErrUnavailable, "no ready node to run the build on")
	}
	want := store.NodeResources{VCPUs: int64(b.CPUCount), MemoryMB: b.MemoryMB}
	slices.SortStableFunc(nodes, func(x, y *store.Node) int {
		fx, fy := x.Capacity.Fits(x.Allocated, want), y.Capacity.Fits(y.Allocated, want)
		switch {
		case fx && !fy:
			return -1
		case fy && !fx:
			return 1
		}
		if hx, hy := parent != "" && x.HoldsTemplate(parent), parent != "" && y.HoldsTemplate(parent); hx != hy {
			if hx {
				return -1
			}
			return 1
		}
		return cmp.Compare(free(y), free(x))
	})
	return nodes, nil
}

func free(n *store.Node) int64 { return n.Capacity.MemoryMB - n.Allocated.MemoryMB }

// follow copies the progress of build id on node nodeID into the catalog
// until the build ends, the node is lost, or r closes.
func (r *Remote) follow(id, nodeID string) {
	log := r.log.With("build_id", id, "node_id", nodeID)
	copied := 0
	t := time.NewTicker(r.cfg.PollInterval)
	defer t.Stop()
	for {
		select {
		case <-r.ctx.Done():
			return
		case <-t.C:
		}
		n, err := r.cfg.Nodes.GetNode(r.ctx, nodeID)
		if err != nil {
			log.Warn("build's node", "error", err)
			continue
		}
		if n.Liveness == store.NodeLost {
			r.finish(log, id, nil, &templates.Reason{Message: "the node running the build was lost"})
			return
		}
		nb, logs, err := r.status(r.ctx, n, id, copied)
		if err != nil {
			log.Info("build progress not read from its node", "error", err)
			continue
		}
		next, err := r.cat.Store().(LogAppender).AppendLogsAt(r.ctx, id, copied, logs...)
		if err != nil {
			log.Warn("build log not copied", "error", err)
			continue
		}
		if next != copied+len(logs) {
			copied = next // another follower was first: read on from its end
			continue
		}
		copied = next
		switch nb.Status {
		case templates.BuildReady:
			r.finish(log, id, nb, nil)
			return
		case templates.BuildError:
			reason := nb.Reason
			if reason == nil {
				reason = &templates.Reason{Message: "the build failed"}
			}
			r.finish(log, id, nb, reason)
			return
		}
	}
}

// finish records the end of build id: its metadata from the node's
// record nb (when known) and its outcome.
func (r *Remote) finish(log *slog.Logger, id string, nb *templates.Build, reason *templates.Reason) {
	ctx := context.WithoutCancel(r.ctx)
	if nb != nil {
		if _, err := r.cat.UpdateBuild(ctx, id, func(b *templates.Build) error {
			b.Env, b.User, b.Workdir, b.StartCmd, b.ReadyCmd = nb.Env, nb.User, nb.Workdir, nb.StartCmd, nb.ReadyCmd
			b.EnvdVersion, b.RootFSSHA256, b.RootFSSize = nb.EnvdVersion, nb.RootFSSHA256, nb.RootFSSize
			b.SnapshotSHA256, b.SnapshotSize, b.SnapshotHost = nb.SnapshotSHA256, nb.SnapshotSize, nb.SnapshotHost
			b.DiskBytes = nb.DiskBytes
			return nil
		}); errdefs.IsConflict(err) {
			return // another follower recorded its end
		} else if err != nil {
			log.Warn("build metadata not recorded", "error", err)
		}
	}
	if _, err := r.cat.FinishBuild(ctx, id, reason); errdefs.IsConflict(err) {
		return // another follower recorded it
	} else if err != nil {
		log.Warn("build end not recorded", "error", err)
		return
	}
	log.Info("build finished on its node", "ok", reason == nil)
}

// Status reports a build with its log from logsOffset on, from the
// catalog.
func (r *Remote) Status(ctx context.Context, teamID, templateID, buildID string, logsOffset int) (*builder.Status, error) {
	return builder.BuildStatus(ctx, r.cat, teamID, templateID, buildID, logsOffset)
}

// Logs returns a build's log entries selected by q.
func (r *Remote) Logs(ctx context.Context, teamID, templateID, buildID string, q builder.LogsQuery) ([]templates.LogEntry, error) {
	return builder.BuildLogs(ctx, r.cat, teamID, templateID, buildID, q)
}

// Resolve turns ref, as team sees it, into the template a node is to
// start (apiserver.TemplateResolver): a ready build of the catalog, by
// build ID (the node resolves it from its copy, pulled first when it
// lacks one; placement prefers the nodes that hold it). Base's record
// (Catalog.EnsureBaseRecord) names each node's own base.
func (r *Remote) Resolve(ctx context.Context, teamID, ref string) (nodeapi.Template, error) {
	t, b, err := r.cat.Lookup(ctx, teamID, ref)
	if err != nil {
		return nodeapi.Template{}, err
	}
	nt := b.NodeTemplate()
	nt.ID, nt.RootFS, nt.SnapshotDir = t.ID, "", ""
	return nt, nil
}

// status reads build id of node n, with its log from offset.
func (r *Remote) status(ctx context.Context, n *store.Node, id string, offset int) (*templates.Build, []templates.LogEntry, error) {
	rpc, err := r.rpc(ctx, n)
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, err := rpc.BuildStatus(ctx, connect.NewRequest(&nodepb.BuildStatusRequest{BuildId: id, LogsOffset: int64(offset)}))
	if err != nil {
		return nil, nil, nodeError(n, err)
	}
	return BuildRecord(resp.Msg.GetBuild()), logsOf(resp.Msg.GetLogs()), nil
}

// rpc returns a client of node n's BuildService, whose calls carry the
// control plane's credential of n.
func (r *Remote) rpc(ctx context.Context, n *store.Node) (nodepbconnect.BuildServiceClient, error) {
	if err := nodeauth.CheckRPCURL(n.RPCAddress); err != nil {
		return nil, fmt.Errorf("node %q: %w: %w", n.ID, errdefs.ErrUnavailable, err)
	}
	cred := ""
	if r.cfg.Credential != nil {
		var err error
		if cred, err = r.cfg.Credential(ctx, n.ID); err != nil {
			return nil, err
		}
	}
	return nodepbconnect.NewBuildServiceClient(r.cfg.HTTP, n.RPCAddress, clientOptions(bearer{token: cred})...), nil
}

// nodeError is node n's answer err in Warren's classes (fromRPC), its
// class kept: a quota the node keeps is ErrExhausted here too, which
// StartBuild tries on no other node. A node that refuses the control
// plane's credential is unavailable to it: that is no refusal of the
// tenant's request.
func nodeError(n *store.Node, err error) error {
	if err == nil {
		return nil
	}
	out := fromRPC(err)
	if errdefs.IsUnauthorized(out) {
		return fmt.Errorf("node %q refused the control plane's credential (%v): %w", n.ID, out, errdefs.ErrUnavailable)
	}
	return fmt.Errorf("node %q: %w", n.ID, out)
}

// callTimeout bounds a call to a node or the control plane; a build
// context's upload is bounded by its client's request instead.
const callTimeout = 5 * time.Minute
