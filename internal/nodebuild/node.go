package nodebuild

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	nodepb "github.com/warren-sandbox/warren/api/node"
	"github.com/warren-sandbox/warren/internal/builder"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/nodeauth"
	"github.com/warren-sandbox/warren/internal/templates"
)

// NodeConfig configures a Node.
type NodeConfig struct {
	// Catalog and Service are the node's own catalog and build service.
	Catalog *templates.Catalog
	Service *builder.Service
	// Credential is what the control plane presents on every call of
	// the BuildService (nodeauth.Credential(token, PurposeRPC)); PullKey
	// checks the pull grants other nodes present to PullArtifact
	// (Credential(token, PurposePull)). Both empty: a loopback node
	// without a token, which asks nothing.
	Credential string
	PullKey    string
	// Locate tells where a build the node lacks can be had (the control
	// plane's answer: Locator.Locate); nil: the node pulls nothing.
	Locate Locate
	// HTTP carries pulls from peers (default: nodeauth.Client(nil): no
	// proxy, no redirects).
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

// Locate is the control plane's answer to a node about a build: where it
// can be had, or whether it is current (ControlPlaneService.LocateBuild).
type Locate func(ctx context.Context, buildID string) (*nodepb.BuildSource, error)

// Node serves a node's builds and artifacts to the control plane and to
// its peers (Handler: the BuildService), and gets the builds it lacks
// (Resolve).
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

// parent makes sure this node holds the build from (pulled first when it
// lacks it, as for a create; the team's right to the template checked)
// and returns the reference its builder resolves it by: the template's
// ID and the tag this node gives each build it copied, the build's ID.
func (n *Node) parent(ctx context.Context, teamID string, from *nodepb.ParentBuild) (string, error) {
	locate := n.cfg.Locate
	if src := from.GetSource(); src != nil {
		// Where the parent is, and the leave to pull it, came with the
		// start.
		locate = func(ctx context.Context, id string) (*nodepb.BuildSource, error) {
			if id != from.GetBuildId() {
				return nil, fmt.Errorf("build %q: %w", id, errdefs.ErrNotFound)
			}
			return src, nil
		}
	}
	nt, err := n.resolve(ctx, teamID, nodeapi.Template{ID: from.GetTemplateId(), BuildID: from.GetBuildId()}, locate)
	if err != nil {
		return "", fmt.Errorf("FROM template %s: %w", from.GetTemplateId(), err)
	}
	b, err := n.cfg.Catalog.Build(ctx, from.GetBuildId())
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
func (n *Node) resolve(ctx context.Context, teamID string, t nodeapi.Template, locate Locate) (nodeapi.Template, error) {
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
func (n *Node) pull(ctx context.Context, buildID string, locate Locate) error {
	src, err := locate(ctx, buildID)
	if err != nil {
		return err
	}
	b, t := *BuildRecord(src.GetBuild()), TemplateRecord(src.GetTemplate())
	if b.ID != buildID || b.Status != templates.BuildReady {
		return fmt.Errorf("build %q is not ready: %w", buildID, errdefs.ErrUnavailable)
	}
	if len(src.GetHolders()) == 0 {
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
	for _, h := range src.GetHolders() {
		err := n.fetch(ctx, h, buildID, want)
		if err == nil {
			errs = nil
			break
		}
		n.log.Warn("pull of a build from a peer failed", "build_id", buildID, "peer", h.GetAddress(), "error", err)
		errs = append(errs, fmt.Errorf("from %s: %w", h.GetAddress(), err))
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
		snap, err := n.pullSnapshot(ctx, b.NodeTemplate(), &b, src.GetHolders())
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
func (n *Node) restoreHere(ctx context.Context, src *nodepb.BuildSource, b *templates.Build) {
	log := n.log.With("build_id", b.ID)
	t, err := n.cfg.Catalog.ResolveBuild(ctx, src.GetTemplate().GetTeamId(), b.ID)
	var dir string
	if err == nil {
		dir, err = n.pullSnapshot(ctx, t, b, src.GetHolders())
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
func (n *Node) fetch(ctx context.Context, h *nodepb.BuildHolder, buildID string, want Digest) error {
	return n.fetchPath(ctx, h, buildID, nodepb.ArtifactKind_ARTIFACT_KIND_ROOTFS, want, n.artifactPath(buildID))
}
