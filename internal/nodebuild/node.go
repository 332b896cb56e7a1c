package nodebuild

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warren-sandbox/warren/internal/awsauth"
	"github.com/warren-sandbox/warren/internal/builder"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/errdefs/errhttp"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/nodeauth"
	"github.com/warren-sandbox/warren/internal/templates"
)

// PathPrefix is where a node serves Node's routes, on its RPC listener.
const PathPrefix = "/warren.nodebuild.v1/"

// StartRequest asks a node to run a build of the control plane's catalog:
// the template and the waiting build (mirrored into the node's catalog)
// and what to build.
type StartRequest struct {
	Template WireTemplate `json:"template"`
	Build    WireBuild    `json:"build"`
	Spec     WireSpec     `json:"spec"`
	// RegistryAuth carries Spec.RegistryAuth (which Spec's own encoding
	// leaves out): the credentials of a private base image's registry,
	// for this build only.
	RegistryAuth *RegistryAuth `json:"registryAuth,omitempty"`
	// From, when set, is the build of the catalog Spec.FromTemplate names
	// (resolved by the control plane, for the build's team): the node
	// gets it first (pulled as for a create when it lacks it) and builds
	// from it.
	From *FromBuild `json:"from,omitempty"`
}

// FromBuild names the parent build of a build FROM a team's template,
// with where the node that builds can pull it (the control plane's
// answer, its grants for that node) should it lack it.
type FromBuild struct {
	TemplateID string  `json:"templateId"`
	BuildID    string  `json:"buildId"`
	Source     *Source `json:"source,omitempty"`
}

// RegistryAuth is builder.RegistryAuth on the wire.
type RegistryAuth struct {
	Username string `json:"username,omitempty"`
	Password string `json:"password,omitempty"`
	// ECR, when set, is exchanged for a token at the region's ECR.
	ECR *ECRAuth `json:"ecr,omitempty"`
}

// ECRAuth is an AWS key for ECR's token exchange.
type ECRAuth struct {
	AccessKeyID     string `json:"accessKeyId"`
	SecretAccessKey string `json:"secretAccessKey"`
	SessionToken    string `json:"sessionToken,omitempty"`
	Region          string `json:"region"`
}

// WireAuth returns a on the wire (nil for none).
func WireAuth(a *builder.RegistryAuth) *RegistryAuth {
	if a == nil {
		return nil
	}
	w := &RegistryAuth{Username: a.Username, Password: a.Password}
	if a.ECR != nil {
		c := a.ECR.Credentials
		w.ECR = &ECRAuth{AccessKeyID: c.AccessKeyID, SecretAccessKey: c.SecretAccessKey, SessionToken: c.SessionToken, Region: a.ECR.Region}
	}
	return w
}

// Auth returns w as the builder takes it (nil for none).
func (w *RegistryAuth) Auth() *builder.RegistryAuth {
	if w == nil {
		return nil
	}
	a := &builder.RegistryAuth{Username: w.Username, Password: w.Password}
	if w.ECR != nil {
		a.ECR = &awsauth.ECR{Credentials: awsauth.Credentials{AccessKeyID: w.ECR.AccessKeyID, SecretAccessKey: w.ECR.SecretAccessKey, SessionToken: w.ECR.SessionToken}, Region: w.ECR.Region}
	}
	return a
}

// BuildStatus is a build on a node with its log from an offset.
type BuildStatus struct {
	Build WireBuild            `json:"build"`
	Logs  []templates.LogEntry `json:"logs"`
}

// Source is where a node that lacks a build gets it: the control plane's
// view of the build and its template, and the nodes that hold its
// artifact, each with the leave to pull it from there. The control plane
// answers so only for a build the asking node needs (a sandbox of it is
// placed there); for a build the node only holds, it says whether the
// build is still current (Current, Superseded) and nothing else.
type Source struct {
	Template WireTemplate `json:"template"`
	Build    WireBuild    `json:"build"`
	Holders  []Holder     `json:"holders"`
	// Current tells whether a tag of the template points at the build
	// (what a create can still name); Superseded whether it is untagged
	// while a tag points at a build finished after it.
	Current    bool `json:"current"`
	Superseded bool `json:"superseded,omitempty"`
}

// Holder is a node that holds a build's artifacts: the base URL of its
// RPC listener and the pull grant (nodeauth.Grant) it takes for this
// build from the node that asked.
type Holder struct {
	Address string `json:"address"`
	Grant   string `json:"grant,omitempty"`
}

// NodeConfig configures a Node.
type NodeConfig struct {
	// Catalog and Service are the node's own catalog and build service.
	Catalog *templates.Catalog
	Service *builder.Service
	// Credential is what the control plane presents on every route
	// (nodeauth.Credential(token, PurposeRPC)); PullKey checks the pull
	// grants other nodes present for the artifact routes
	// (Credential(token, PurposePull)). Both empty: a loopback node
	// without a token, which asks nothing.
	Credential string
	PullKey    string
	// Locate tells where a build the node lacks can be had (the control
	// plane's answer; APIClient.Locate); nil: the node pulls nothing.
	Locate func(ctx context.Context, buildID string) (*Source, error)
	// HTTP carries pulls from peers (default: a client without proxy).
	HTTP   *http.Client
	Logger *slog.Logger
	// Registry, when set, receives node_template_pulls_total,
	// node_template_pull_bytes_total and node_template_snapshot_pulls_total.
	Registry prometheus.Registerer
	// Snapshots, when set, makes the snapshots on ready of the builds
	// this node pulls restorable here (node.Agent); nil: their sandboxes
	// start cold.
	Snapshots Snapshots
}

// Node serves a node's builds and artifacts to the control plane and to
// its peers, and gets the builds it lacks (Resolve).
type Node struct {
	cfg NodeConfig
	log *slog.Logger

	mu      sync.Mutex
	exports map[string]*flight // artifacts being written
	// localSnaps are builds whose snapshot was found not to travel.
	localSnaps map[string]bool
	pulls      map[string]*flight // builds being pulled

	pulled    *prometheus.CounterVec // by result
	pullBytes prometheus.Counter
	snapPulls *prometheus.CounterVec // by result
}

// flight is one export or pull in progress; others wait for done.
type flight struct {
	done chan struct{}
	err  error
}

// NewNode returns a Node over the node's catalog and build service.
func NewNode(cfg NodeConfig) (*Node, error) {
	if cfg.Catalog == nil || cfg.Service == nil {
		return nil, fmt.Errorf("nodebuild: a catalog and a build service are required: %w", errdefs.ErrInvalid)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.HTTP == nil {
		cfg.HTTP = nodeauth.Client(nil)
	}
	n := &Node{cfg: cfg, log: cfg.Logger, exports: map[string]*flight{}, pulls: map[string]*flight{}, localSnaps: map[string]bool{},
		pulled: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "node_template_pulls_total",
			Help: "Builds a node pulled from a peer, by result (pulled, digest_mismatch, failed)."}, []string{"result"}),
		pullBytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "node_template_pull_bytes_total",
			Help: "Bytes of build artifacts a node received from its peers and kept."}),
		snapPulls: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "node_template_snapshot_pulls_total",
			Help: "Snapshots on ready of pulled builds, by result (restorable, incompatible, none, refused)."}, []string{"result"}),
	}
	if cfg.Registry != nil {
		for _, c := range []prometheus.Collector{n.pulled, n.pullBytes, n.snapPulls} {
			if err := cfg.Registry.Register(c); err != nil {
				return nil, fmt.Errorf("nodebuild metrics: %w", err)
			}
		}
	}
	return n, nil
}

// coalesce runs fn once for key among concurrent callers, who all get its
// error.
func (n *Node) coalesce(ctx context.Context, m map[string]*flight, key string, fn func() error) error {
	n.mu.Lock()
	if f, ok := m[key]; ok {
		n.mu.Unlock()
		select {
		case <-f.done:
			return f.err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	f := &flight{done: make(chan struct{})}
	m[key] = f
	n.mu.Unlock()
	f.err = fn()
	n.mu.Lock()
	delete(m, key)
	n.mu.Unlock()
	close(f.done)
	return f.err
}

// Handler serves the routes under PathPrefix: every one to the control
// plane (its credential), the artifact routes also to a peer with a pull
// grant for that build.
func (n *Node) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+PathPrefix+"builds", n.controlPlane(n.start))
	mux.HandleFunc("GET "+PathPrefix+"builds/{id}", n.controlPlane(n.status))
	mux.HandleFunc("GET "+PathPrefix+"builds/{id}/rootfs", n.puller(n.rootfs))
	mux.HandleFunc("GET "+PathPrefix+"builds/{id}/snapshot", n.puller(n.snapshot))
	mux.HandleFunc("POST "+PathPrefix+"templates/{id}/files/{hash}", n.controlPlane(n.filesPresent))
	mux.HandleFunc("PUT "+PathPrefix+"templates/{id}/files/{hash}", n.controlPlane(n.putFiles))
	return mux
}

// open reports whether the node asks nothing (no token: loopback only).
func (n *Node) open() bool { return n.cfg.Credential == "" && n.cfg.PullKey == "" }

// controlPlane serves h to the control plane only.
func (n *Node) controlPlane(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !n.open() && !nodeauth.Equal(nodeauth.Bearer(r.Header), n.cfg.Credential) {
			n.log.Warn("nodebuild request refused: not the control plane's credential", "method", r.Method, "path", r.URL.Path, "remote_addr", r.RemoteAddr)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		h(w, r)
	}
}

// puller serves h to the control plane and to a peer whose pull grant
// names the build.
func (n *Node) puller(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if n.open() || nodeauth.Equal(nodeauth.Bearer(r.Header), n.cfg.Credential) {
			h(w, r)
			return
		}
		peer, err := nodeauth.CheckGrant(n.cfg.PullKey, r.PathValue("id"), r.Header.Get(nodeauth.HeaderGrant), time.Now())
		if err != nil {
			n.log.Warn("artifact pull refused", "build_id", r.PathValue("id"), "remote_addr", r.RemoteAddr, "error", err)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		n.log.Info("artifact pull", "build_id", r.PathValue("id"), "peer_node_id", peer, "path", r.URL.Path)
		h(w, r)
	}
}

// fail answers err with its class's status and the message a client may
// see (errdefs.ClientMessage; the control plane passes it on), the rest
// logged.
func (n *Node) fail(w http.ResponseWriter, r *http.Request, err error) {
	status := errhttp.Status(err)
	n.log.Info("nodebuild request failed", "method", r.Method, "path", r.URL.Path, "status", status, "error", err)
	http.Error(w, errdefs.ClientMessage(err), status)
}

func (n *Node) start(w http.ResponseWriter, r *http.Request) {
	var req StartRequest
	if err := decode(http.MaxBytesReader(w, r.Body, 4<<20), 4<<20, &req); err != nil {
		n.fail(w, r, fmt.Errorf("start build: %w", err))
		return
	}
	b, t := req.Build.Record(), req.Template.Record()
	if b.Status != templates.BuildWaiting {
		n.fail(w, r, fmt.Errorf("build %q is %s, not waiting: %w", b.ID, b.Status, errdefs.ErrConflict))
		return
	}
	if err := n.cfg.Catalog.Mirror(r.Context(), t, b); err != nil {
		n.fail(w, r, err)
		return
	}
	spec := req.Spec.Spec()
	spec.RegistryAuth = req.RegistryAuth.Auth()
	if req.From != nil {
		ref, err := n.parent(r.Context(), t.TeamID, *req.From)
		if err != nil {
			n.fail(w, r, err)
			return
		}
		spec.FromTemplate = ref
	}
	if _, err := n.cfg.Service.StartBuild(r.Context(), builder.StartRequest{
		TeamID: t.TeamID, TemplateID: t.ID, BuildID: b.ID, Spec: spec,
	}); err != nil {
		n.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusAccepted)
}

// FilesPresence answers whether a node has a build context.
type FilesPresence struct {
	Present bool `json:"present"`
}

// filesPresent mirrors the template in the body and answers whether the
// COPY context hash of it is here (the team's upload quota checked, as
// builder.Service.Files does).
func (n *Node) filesPresent(w http.ResponseWriter, r *http.Request) {
	var wt WireTemplate
	if err := decode(http.MaxBytesReader(w, r.Body, 1<<20), 1<<20, &wt); err != nil {
		n.fail(w, r, fmt.Errorf("files: %w", err))
		return
	}
	t := wt.Record()
	if t.ID != r.PathValue("id") {
		n.fail(w, r, fmt.Errorf("files: template %q in the body, %q in the path: %w", t.ID, r.PathValue("id"), errdefs.ErrInvalid))
		return
	}
	if err := n.cfg.Catalog.MirrorTemplate(r.Context(), t); err != nil {
		n.fail(w, r, err)
		return
	}
	present, _, err := n.cfg.Service.Files(r.Context(), t.TeamID, t.ID, r.PathValue("hash"))
	if err != nil {
		n.fail(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(FilesPresence{Present: present}) //nolint:errcheck
}

// MaxUploadBytes bounds one build context a node takes (as
// builder.ServiceConfig's default).
const MaxUploadBytes = 4 << 30

// putFiles stores a build context of a template mirrored by filesPresent.
func (n *Node) putFiles(w http.ResponseWriter, r *http.Request) {
	id, hash := r.PathValue("id"), r.PathValue("hash")
	if err := n.cfg.Service.PutFiles(r.Context(), id, hash, http.MaxBytesReader(w, r.Body, MaxUploadBytes)); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			err = errdefs.Publicf(errdefs.ErrInvalid, "upload larger than %d bytes", int64(MaxUploadBytes))
		}
		n.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusCreated)
}

func (n *Node) status(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	offset, err := strconv.Atoi(r.URL.Query().Get("logsOffset"))
	if err != nil || offset < 0 {
		offset = 0
	}
	if err := templates.CheckID("build", id); err != nil {
		n.fail(w, r, err)
		return
	}
	b, err := n.cfg.Catalog.Build(r.Context(), id)
	if err != nil {
		n.fail(w, r, err)
		return
	}
	if b.Status == templates.BuildReady {
		if b, err = n.Export(r.Context(), id); err != nil {
			n.fail(w, r, err)
			return
		}
	}
	logs, err := n.cfg.Catalog.Store().Logs(r.Context(), id, offset)
	if err != nil {
		n.fail(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(BuildStatus{Build: BuildOnWire(b), Logs: logs}) //nolint:errcheck // the peer sees a short body
}

func (n *Node) rootfs(w http.ResponseWriter, r *http.Request) {
	n.serveArtifact(w, r, "artifact", func(b *templates.Build) (string, int64, string, error) {
		return n.artifactPath(b.ID), b.RootFSSize, b.RootFSSHA256, nil
	})
}

// serveArtifact streams one artifact of the build the request names, its
// path, size and sha256 given by which from the build this node exports.
func (n *Node) serveArtifact(w http.ResponseWriter, r *http.Request, what string, which func(*templates.Build) (path string, size int64, sha string, err error)) {
	id := r.PathValue("id")
	if err := templates.CheckID("build", id); err != nil {
		n.fail(w, r, err)
		return
	}
	b, err := n.Export(r.Context(), id)
	if err != nil {
		n.fail(w, r, err)
		return
	}
	path, size, sha, err := which(b)
	if err != nil {
		n.fail(w, r, err)
		return
	}
	f, err := os.Open(path)
	if err != nil {
		n.fail(w, r, fmt.Errorf("build %q %s: %w: %w", id, what, errdefs.ErrUnavailable, err))
		return
	}
	defer f.Close()
	w.Header().Set("Content-Type", "application/x-tar")
	w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
	w.Header().Set(HeaderSHA256, sha)
	if _, err := f.WriteTo(w); err != nil {
		n.log.Info("artifact stream ended early", "artifact", what, "build_id", id, "error", err)
	}
}

// parent makes sure this node holds the build from (pulled first when it
// lacks it, as for a create; the team's right to the template checked)
// and returns the reference its builder resolves it by: the template's
// ID and the tag this node gives each build it copied, the build's ID.
func (n *Node) parent(ctx context.Context, teamID string, from FromBuild) (string, error) {
	locate := n.cfg.Locate
	if from.Source != nil {
		// Where the parent is, and the leave to pull it, came with the
		// start.
		locate = func(ctx context.Context, id string) (*Source, error) {
			if id != from.BuildID {
				return nil, fmt.Errorf("build %q: %w", id, errdefs.ErrNotFound)
			}
			return from.Source, nil
		}
	}
	nt, err := n.resolve(ctx, teamID, nodeapi.Template{ID: from.TemplateID, BuildID: from.BuildID}, locate)
	if err != nil {
		return "", fmt.Errorf("FROM template %s: %w", from.TemplateID, err)
	}
	b, err := n.cfg.Catalog.Build(ctx, from.BuildID)
	if err != nil {
		return "", err
	}
	if err := n.tagCopy(ctx, nt.ID, b); err != nil {
		return "", err
	}
	return nt.ID + ":" + b.ID, nil
}

// tagCopy tags the copied build b of template templateID with its own ID
// in this node's catalog: the collector keeps it until Sync finds the
// control plane let the build go.
func (n *Node) tagCopy(ctx context.Context, templateID string, b *templates.Build) error {
	_, err := n.cfg.Catalog.Store().UpdateTemplate(ctx, templateID, func(t *templates.Template) error {
		if _, ok := t.Tags[b.ID]; ok {
			return nil
		}
		if t.Tags == nil {
			t.Tags = map[string]templates.Tag{}
		}
		t.Tags[b.ID] = templates.Tag{BuildID: b.ID, CreatedAt: b.FinishedAt}
		return nil
	})
	return err
}

// HeaderSHA256 carries an artifact's sha256 with its stream.
const HeaderSHA256 = "X-Warren-Artifact-Sha256"

func (n *Node) artifactPath(buildID string) string {
	return filepath.Join(n.cfg.Catalog.BuildDir(buildID), ArtifactName)
}

// Export makes sure the ready build buildID has its artifact on this node
// (written once, on first need) and its digest recorded, and returns the
// build.
func (n *Node) Export(ctx context.Context, buildID string) (*templates.Build, error) {
	b, err := n.cfg.Catalog.Build(ctx, buildID)
	if err != nil {
		return nil, err
	}
	if b.Status != templates.BuildReady {
		return nil, fmt.Errorf("build %q is %s: %w", buildID, b.Status, errdefs.ErrConflict)
	}
	if n.exported(b) {
		return b, nil
	}
	err = n.coalesce(ctx, n.exports, buildID, func() error {
		dir := b.RootFSDir
		if dir == "" {
			dir = filepath.Join(n.cfg.Catalog.BuildDir(buildID), "rootfs")
		}
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			return fmt.Errorf("build %q: root filesystem %s is not on this node: %w", buildID, dir, errdefs.ErrUnavailable)
		}
		if _, err := os.Stat(n.artifactPath(buildID)); b.RootFSSHA256 == "" || err != nil {
			d, err := writeArtifact(context.WithoutCancel(ctx), dir, n.artifactPath(buildID))
			if err != nil {
				return fmt.Errorf("build %q artifact: %w", buildID, err)
			}
			if _, err = n.cfg.Catalog.Store().UpdateBuild(context.WithoutCancel(ctx), buildID, func(b *templates.Build) error {
				b.RootFSSHA256, b.RootFSSize = d.SHA256, d.Size
				return nil
			}); err != nil {
				return err
			}
			n.log.Info("build artifact written", "build_id", buildID, "size", d.Size, "sha256", d.SHA256)
		}
		if _, err := os.Stat(n.snapshotArtifactPath(buildID)); b.SnapshotDir != "" && (b.SnapshotSHA256 == "" || err != nil) {
			return n.exportSnapshot(context.WithoutCancel(ctx), b)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return n.cfg.Catalog.Build(ctx, buildID)
}

// exported reports whether b's artifacts are written and recorded: its
// root filesystem's, and its snapshot's when it has one (a snapshot that
// does not travel is looked at once per process: exportSnapshot).
func (n *Node) exported(b *templates.Build) bool {
	if _, err := os.Stat(n.artifactPath(b.ID)); b.RootFSSHA256 == "" || err != nil {
		return false
	}
	if b.SnapshotDir == "" {
		return true
	}
	if _, err := os.Stat(n.snapshotArtifactPath(b.ID)); b.SnapshotSHA256 != "" && err == nil {
		return true
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.localSnaps[b.ID]
}

// Resolve is the node RPC's template resolver (noderpc
// Options.ResolveTemplate): a create naming build t.BuildID starts from
// the node's copy of it, pulled first from a node that holds it when this
// node lacks it. The system templates (BuildID equal to their ID, e.g.
// base) each node prepared itself resolve by ID.
func (n *Node) Resolve(ctx context.Context, teamID string, t nodeapi.Template) (nodeapi.Template, error) {
	return n.resolve(ctx, teamID, t, n.cfg.Locate)
}

// resolve is Resolve, asking locate where a build it lacks is.
func (n *Node) resolve(ctx context.Context, teamID string, t nodeapi.Template, locate func(context.Context, string) (*Source, error)) (nodeapi.Template, error) {
	if t.BuildID == "" || t.BuildID == t.ID {
		return n.cfg.Catalog.Resolve(ctx, teamID, t.ID)
	}
	if err := templates.CheckID("build", t.BuildID); err != nil {
		return nodeapi.Template{}, err
	}
	nt, err := n.cfg.Catalog.ResolveBuild(ctx, teamID, t.BuildID)
	_, gerr := n.cfg.Catalog.Build(ctx, t.BuildID)
	switch {
	case err == nil:
		return nt, nil
	case errdefs.IsNotFound(err) && gerr == nil:
		return nodeapi.Template{}, err // held here, of a template the team may not use
	case errdefs.IsNotFound(err):
		// Not here: pull it.
	case errdefs.IsUnavailable(err) && gerr == nil:
		// Recorded, its files gone (the template collector frees the
		// copies no sandbox uses): pull it again.
	default:
		return nodeapi.Template{}, err
	}
	if locate == nil {
		return nodeapi.Template{}, fmt.Errorf("template %q: this node lacks build %s and cannot pull it: %w", t.ID, t.BuildID, errdefs.ErrUnavailable)
	}
	if err := n.coalesce(ctx, n.pulls, t.BuildID, func() error {
		err := n.pull(context.WithoutCancel(ctx), t.BuildID, locate)
		switch {
		case err == nil:
			n.pulled.WithLabelValues("pulled").Inc()
		case errors.Is(err, ErrDigestMismatch):
			n.pulled.WithLabelValues("digest_mismatch").Inc()
		default:
			n.pulled.WithLabelValues("failed").Inc()
		}
		return err
	}); err != nil {
		return nodeapi.Template{}, fmt.Errorf("template %q: this node lacks build %s and could not pull it: %w", t.ID, t.BuildID, err)
	}
	return n.cfg.Catalog.ResolveBuild(ctx, teamID, t.BuildID)
}

// pull gets build buildID from a node that holds it: the artifact
// received and checked, unpacked, then the build mirrored into this
// node's catalog, ready.
func (n *Node) pull(ctx context.Context, buildID string, locate func(context.Context, string) (*Source, error)) error {
	src, err := locate(ctx, buildID)
	if err != nil {
		return err
	}
	b, t := *src.Build.Record(), src.Template.Record()
	if b.ID != buildID || b.Status != templates.BuildReady {
		return fmt.Errorf("build %q is not ready: %w", buildID, errdefs.ErrUnavailable)
	}
	if len(src.Holders) == 0 {
		return fmt.Errorf("build %q: no node holds it: %w", buildID, errdefs.ErrUnavailable)
	}
	if b.SandboxSnapshot != nil {
		// Its sandboxes start from the snapshot only: a node that cannot
		// restore it fetches nothing.
		if err := n.restorable(b.NodeTemplate(), &b); err != nil {
			n.snapPulls.WithLabelValues(snapshotPullResult(err)).Inc()
			n.log.Warn("a sandbox snapshot's build is not pulled: its snapshot cannot be restored here", "build_id", buildID, "error", err)
			return fmt.Errorf("build %q is a sandbox's snapshot, which this node cannot restore: %w", buildID, err)
		}
	}
	dir := n.cfg.Catalog.BuildDir(buildID)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	want := Digest{SHA256: b.RootFSSHA256, Size: b.RootFSSize}
	var errs []error
	for _, h := range src.Holders {
		err := n.fetch(ctx, h, buildID, want)
		if err == nil {
			errs = nil
			break
		}
		n.log.Warn("pull of a build from a peer failed", "build_id", buildID, "peer", h.Address, "error", err)
		errs = append(errs, fmt.Errorf("from %s: %w", h.Address, err))
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	rootfs := filepath.Join(dir, "rootfs")
	if err := unpack(ctx, n.artifactPath(buildID), rootfs); err != nil {
		os.Remove(n.artifactPath(buildID))
		// Not the create's fault (the class of a tar's refusal): the
		// artifact, as recorded, is not one a node wrote.
		n.log.Warn("a pulled build's artifact was refused", "build_id", buildID, "error", err)
		return fmt.Errorf("build %q: its artifact does not unpack (%v): %w", buildID, err, errdefs.ErrUnavailable)
	}
	// A template's snapshot on ready, if any, comes next (pullSnapshot),
	// once the build is recorded here; a sandbox snapshot's comes first:
	// without it the build is not pulled (its sandboxes never start cold).
	b.RootFSDir = rootfs
	if b.SandboxSnapshot != nil {
		snap, err := n.pullSnapshot(ctx, b.NodeTemplate(), &b, src.Holders)
		n.snapPulls.WithLabelValues(snapshotPullResult(err)).Inc()
		if err != nil {
			os.RemoveAll(dir)
			n.log.Warn("a sandbox snapshot's build is not pulled: its snapshot cannot be restored here", "build_id", buildID, "error", err)
			return fmt.Errorf("build %q is a sandbox's snapshot, which this node cannot restore: %w", buildID, err)
		}
		b.SnapshotDir = snap
		want.Size += b.SnapshotSize
	}
	if err := n.cfg.Catalog.Mirror(ctx, t, &b); err != nil {
		return err
	}
	if b.SandboxSnapshot != nil {
		// A record of an earlier pull stays as it was: it learns where the
		// snapshot lies now.
		if _, err := n.cfg.Catalog.Store().UpdateBuild(ctx, b.ID, func(x *templates.Build) error { x.SnapshotDir = b.SnapshotDir; return nil }); err != nil {
			return err
		}
	}
	if err := n.tagCopy(ctx, t.ID, &b); err != nil {
		return err
	}
	n.pullBytes.Add(float64(want.Size))
	n.log.Info("build pulled from a peer", "build_id", buildID, "size", want.Size, "sha256", want.SHA256, "sandbox_snapshot", b.SandboxSnapshot != nil)
	if b.SandboxSnapshot == nil && (b.StartCmd != "" || b.SnapshotSHA256 != "") {
		n.restoreHere(ctx, src, &b)
	}
	return nil
}

// snapshotPullResult is the node_template_snapshot_pulls_total result of
// a snapshot's pull that ended in err.
func snapshotPullResult(err error) string {
	switch {
	case err == nil:
		return "restorable"
	case errdefs.IsNotFound(err):
		return "none"
	case errdefs.IsUnsupported(err):
		return "incompatible"
	}
	return "refused"
}

// restoreHere gets the snapshot on ready of build b, just pulled, when
// it can be restored here; otherwise it says why the build's sandboxes
// start cold here.
func (n *Node) restoreHere(ctx context.Context, src *Source, b *templates.Build) {
	log := n.log.With("build_id", b.ID)
	t, err := n.cfg.Catalog.ResolveBuild(ctx, src.Template.TeamID, b.ID)
	var dir string
	if err == nil {
		dir, err = n.pullSnapshot(ctx, t, b, src.Holders)
	}
	if err == nil {
		_, err = n.cfg.Catalog.Store().UpdateBuild(ctx, b.ID, func(x *templates.Build) error { x.SnapshotDir = dir; return nil })
		if err == nil {
			n.snapPulls.WithLabelValues("restorable").Inc()
			n.pullBytes.Add(float64(b.SnapshotSize))
			log.Info("a pulled build's snapshot on ready is restorable here", "snapshot", dir, "size", b.SnapshotSize, "sha256", b.SnapshotSHA256)
			return
		}
	}
	result := snapshotPullResult(err)
	n.snapPulls.WithLabelValues(result).Inc()
	log.Warn("a pulled build's sandboxes start cold here, without its snapshot on ready", "reason", result, "error", err)
}

// fetch receives the artifact of buildID from holder h.
func (n *Node) fetch(ctx context.Context, h Holder, buildID string, want Digest) error {
	return n.fetchPath(ctx, h, buildID, "rootfs", want, n.artifactPath(buildID))
}
