package nodebuild

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/templates"
)

// A sandbox snapshot (E2B's POST /sandboxes/{id}/snapshots) is a build of
// the control plane's catalog whose snapshot is the sandbox's memory
// image and saved layer, over the root filesystem of the sandbox's
// template (templates.Build.SandboxSnapshot). The control plane names the
// build; the node that runs the sandbox takes the snapshot into that
// build's directory of its own catalog (SandboxSnapshots, the node side
// of nodeapi.SandboxSnapshotter) and, under `warren node`, keeps it as a
// copy of the build with its two artifacts written: the root filesystem's
// (shared with the source build's) and the snapshot's, whose digests and
// host the control plane records. Another node that is to start it pulls
// the build as any other (Resolve), and refuses it when it cannot restore
// the snapshot: a sandbox snapshot's sandboxes never start cold.

// SandboxAgent is what SandboxSnapshots asks of the node agent
// (node.Agent).
type SandboxAgent interface {
	Get(ctx context.Context, id string) (*nodeapi.Sandbox, error)
	// SnapshotSandboxInto checkpoints running sandbox id into dir, leaving
	// it running, and returns the template it was started from; with
	// travel, the snapshot is written to be restorable on other nodes too
	// when this node's can be.
	SnapshotSandboxInto(ctx context.Context, id, dir string, travel bool) (nodeapi.Template, error)
	// DeleteSnapshot deletes the snapshot in dir with its saved layer.
	DeleteSnapshot(ctx context.Context, dir string) error
}

// SandboxSnapshotsConfig configures SandboxSnapshots.
type SandboxSnapshotsConfig struct {
	Agent SandboxAgent
	// Catalog is the node's template catalog.
	Catalog *templates.Catalog
	// Node, when set (`warren node`), is the node's build artifacts: a
	// snapshot is recorded in Catalog as a ready copy of the control
	// plane's build and its artifacts are written for peers. Nil (`warren
	// serve`): Catalog is the control plane's own, whose waiting record of
	// the build learns where the snapshot lies.
	Node   *Node
	Logger *slog.Logger
}

// SandboxSnapshots is the node side of nodeapi.SandboxSnapshotter: it
// keeps the agent's sandbox snapshots as builds of the node's catalog,
// named by the control plane, with no path crossing.
type SandboxSnapshots struct {
	cfg SandboxSnapshotsConfig
	log *slog.Logger
}

var _ nodeapi.SandboxSnapshotter = (*SandboxSnapshots)(nil)

// NewSandboxSnapshots returns the sandbox snapshots of cfg.Agent.
func NewSandboxSnapshots(cfg SandboxSnapshotsConfig) (*SandboxSnapshots, error) {
	if cfg.Agent == nil || cfg.Catalog == nil {
		return nil, fmt.Errorf("nodebuild: sandbox snapshots need the agent and the catalog: %w", errdefs.ErrInvalid)
	}
	if cfg.Node != nil && cfg.Node.cfg.Catalog != cfg.Catalog {
		return nil, fmt.Errorf("nodebuild: sandbox snapshots: the node's artifacts are of another catalog: %w", errdefs.ErrInvalid)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &SandboxSnapshots{cfg: cfg, log: cfg.Logger}, nil
}

// snapshotDir is where build buildID's snapshot lies on this node.
func (s *SandboxSnapshots) snapshotDir(buildID string) string {
	return filepath.Join(s.cfg.Catalog.BuildDir(buildID), snapshotDirName)
}

// SnapshotSandbox implements nodeapi.SandboxSnapshotter.
func (s *SandboxSnapshots) SnapshotSandbox(ctx context.Context, id string, req nodeapi.SnapshotRequest) (*nodeapi.SandboxSnapshot, error) {
	if err := templates.CheckID("template", req.TemplateID); err != nil {
		return nil, err
	}
	if err := templates.CheckID("build", req.BuildID); err != nil {
		return nil, err
	}
	if req.TeamID == "" || templates.Reserved(req.TemplateID) || req.BuildID == req.TemplateID {
		return nil, fmt.Errorf("snapshot of sandbox %q: a team's new build is required, not template %q build %q of team %q: %w",
			id, req.TemplateID, req.BuildID, req.TeamID, errdefs.ErrInvalid)
	}
	sb, err := s.cfg.Agent.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if sb.TeamID != req.TeamID {
		return nil, fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
	}
	if err := s.checkBuild(ctx, req); err != nil {
		return nil, err
	}
	dir := s.snapshotDir(req.BuildID)
	// Under `warren serve` no other node restores it: the layer's changes
	// are not written (the sandbox stays frozen for less).
	src, err := s.cfg.Agent.SnapshotSandboxInto(ctx, id, dir, s.cfg.Node != nil)
	if err != nil {
		os.Remove(s.cfg.Catalog.BuildDir(req.BuildID)) // only when empty: nothing of another's
		return nil, err
	}
	var out *nodeapi.SandboxSnapshot
	if s.cfg.Node == nil {
		out, err = s.recordShared(ctx, req, src, dir)
	} else {
		out, err = s.recordCopy(ctx, id, req, sb, src, dir)
	}
	if err != nil {
		if derr := s.drop(context.WithoutCancel(ctx), req.BuildID, dir); derr != nil {
			s.log.Warn("snapshot not recorded, and not deleted", "sandbox_id", id, "build_id", req.BuildID, "error", derr)
		}
		return nil, fmt.Errorf("snapshot of sandbox %q: %w", id, err)
	}
	out.Source = src
	out.Source.RootFS, out.Source.SnapshotDir = "", ""
	s.log.Info("sandbox snapshot kept as a build", "sandbox_id", id, "template_id", req.TemplateID, "build_id", req.BuildID,
		"source_build_id", src.BuildID, "travels", out.Travels())
	return out, nil
}

// checkBuild refuses a build the snapshot may not become: under `warren
// node` one this node holds already (the snapshot would replace its
// files), or of a template mirrored here for another team; under `warren
// serve` any but the control plane's building record made for it.
func (s *SandboxSnapshots) checkBuild(ctx context.Context, req nodeapi.SnapshotRequest) error {
	b, err := s.cfg.Catalog.Build(ctx, req.BuildID)
	if s.cfg.Node == nil {
		switch {
		case err != nil:
			return err
		case b.TemplateID != req.TemplateID || b.Status != templates.BuildBuilding || b.SnapshotDir != "":
			return fmt.Errorf("build %q (template %q, %s) is not one made for a snapshot: %w", b.ID, b.TemplateID, b.Status, errdefs.ErrConflict)
		}
		return nil
	}
	switch {
	case err == nil:
		return fmt.Errorf("build %q: this node holds it already: %w", req.BuildID, errdefs.ErrAlreadyExists)
	case !errdefs.IsNotFound(err):
		return err
	}
	if t, err := s.cfg.Catalog.Store().GetTemplate(ctx, req.TemplateID); err == nil && t.TeamID != req.TeamID {
		return fmt.Errorf("template %q is another team's: %w", req.TemplateID, errdefs.ErrConflict)
	} else if err != nil && !errdefs.IsNotFound(err) {
		return err
	}
	return nil
}

// recordShared tells the control plane's own build record (`warren
// serve`) where the snapshot and the tree under it lie; the rest of the
// record is the control plane's.
func (s *SandboxSnapshots) recordShared(ctx context.Context, req nodeapi.SnapshotRequest, src nodeapi.Template, dir string) (*nodeapi.SandboxSnapshot, error) {
	// The source's tar (and its fingerprint, so that a lost tree is never
	// re-made from a changed tar) goes with the tree.
	var tar string
	var fp *templates.TarFingerprint
	if sb, err := s.cfg.Catalog.Build(ctx, src.BuildID); err == nil {
		tar, fp = sb.RootFSTar, sb.RootFSTarFingerprint
	}
	_, err := s.cfg.Catalog.UpdateBuild(ctx, req.BuildID, func(b *templates.Build) error {
		if b.Status != templates.BuildBuilding || b.SnapshotDir != "" {
			return fmt.Errorf("build %q changed during the snapshot: %w", b.ID, errdefs.ErrConflict)
		}
		b.RootFSDir, b.RootFSTar, b.RootFSTarFingerprint, b.SnapshotDir = src.RootFS, tar, fp, dir
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &nodeapi.SandboxSnapshot{}, nil
}

// recordCopy records the snapshot in this node's catalog (`warren node`)
// as a ready copy of the control plane's build, tagged as copies are
// (Sync lets it go with the control plane's record), and writes its
// artifacts for peers.
func (s *SandboxSnapshots) recordCopy(ctx context.Context, id string, req nodeapi.SnapshotRequest, sb *nodeapi.Sandbox, src nodeapi.Template, dir string) (*nodeapi.SandboxSnapshot, error) {
	n := s.cfg.Node
	now := time.Now().UTC()
	res := sb.Resources
	t := &templates.Template{ID: req.TemplateID, TeamID: req.TeamID, Tags: map[string]templates.Tag{},
		CPUCount: res.VCPUs, MemoryMB: res.MemoryMB, DiskMB: res.DiskMB, CreatedAt: now, UpdatedAt: now}
	b := &templates.Build{
		ID: req.BuildID, TemplateID: req.TemplateID, Status: templates.BuildReady,
		RootFSDir: src.RootFS, Env: src.Env, User: src.User, Workdir: src.Workdir, StartCmd: src.StartCmd,
		CPUCount: res.VCPUs, MemoryMB: res.MemoryMB, DiskMB: res.DiskMB, SnapshotDir: dir, EnvdVersion: sb.EnvdVersion,
		SandboxSnapshot: &templates.SandboxSnapshotOrigin{SandboxID: id, TeamID: req.TeamID, CreatedAt: now},
		CreatedAt:       now, UpdatedAt: now, FinishedAt: now,
	}
	if err := s.cfg.Catalog.Mirror(ctx, t, b); err != nil {
		return nil, err
	}
	if err := n.tagCopy(ctx, t.ID, b); err != nil {
		return nil, err
	}
	n.shareRootFS(ctx, src.BuildID, b.ID)
	eb, err := n.Export(ctx, b.ID)
	if err != nil {
		return nil, err
	}
	out := &nodeapi.SandboxSnapshot{RootFS: nodeapi.Artifact{SHA256: eb.RootFSSHA256, Size: eb.RootFSSize}}
	if eb.SnapshotSHA256 != "" && eb.SnapshotHost != nil {
		host := *eb.SnapshotHost
		out.Snapshot, out.Host = nodeapi.Artifact{SHA256: eb.SnapshotSHA256, Size: eb.SnapshotSize}, &host
	}
	return out, nil
}

// shareRootFS makes the root filesystem artifact of build dst, whose tree
// is build src's, src's own (a hard link, written first when src has
// none yet): the snapshots of one template's sandboxes share one tar.
// When it cannot, dst's export writes a tar of its own.
func (n *Node) shareRootFS(ctx context.Context, src, dst string) {
	if src == "" || src == dst {
		return
	}
	sb, err := n.Export(ctx, src)
	if err == nil {
		err = os.Link(n.artifactPath(src), n.artifactPath(dst))
	}
	if err == nil {
		_, err = n.cfg.Catalog.Store().UpdateBuild(ctx, dst, func(b *templates.Build) error {
			b.RootFSSHA256, b.RootFSSize = sb.RootFSSHA256, sb.RootFSSize
			return nil
		})
	}
	if err != nil {
		os.Remove(n.artifactPath(dst))
		n.log.Info("a sandbox snapshot's root filesystem gets an artifact of its own", "build_id", dst, "source_build_id", src, "error", err)
	}
}

// DeleteSandboxSnapshot implements nodeapi.SandboxSnapshotter.
func (s *SandboxSnapshots) DeleteSandboxSnapshot(ctx context.Context, buildID string) error {
	if err := templates.CheckID("build", buildID); err != nil {
		return err
	}
	b, err := s.cfg.Catalog.Build(ctx, buildID)
	if err != nil {
		return err
	}
	dir := s.snapshotDir(buildID)
	if b.SnapshotDir != dir || (s.cfg.Node != nil && b.SandboxSnapshot == nil) || (s.cfg.Node == nil && b.Status != templates.BuildBuilding) {
		return fmt.Errorf("build %q: no sandbox snapshot of it to delete here: %w", buildID, errdefs.ErrNotFound)
	}
	return s.drop(ctx, buildID, dir)
}

// drop deletes the snapshot of build buildID in dir and makes its record
// say so: under `warren serve` the control plane's building record loses
// its snapshot (the control plane fails or deletes it next); under `warren
// node` the copy is failed and untagged, and its artifacts go (the
// template collector frees the rest).
func (s *SandboxSnapshots) drop(ctx context.Context, buildID, dir string) error {
	errs := []error{s.cfg.Agent.DeleteSnapshot(ctx, dir)}
	st := s.cfg.Catalog.Store()
	b, err := st.UpdateBuild(ctx, buildID, func(b *templates.Build) error {
		b.SnapshotDir = ""
		if s.cfg.Node != nil {
			b.Status, b.Reason = templates.BuildError, &templates.Reason{Message: "the control plane did not record the snapshot", Step: "snapshot"}
			b.SnapshotSHA256, b.SnapshotSize, b.SnapshotHost = "", 0, nil
		}
		return nil
	})
	switch {
	case errdefs.IsNotFound(err):
		return errors.Join(errs...)
	case err != nil:
		return errors.Join(append(errs, err)...)
	}
	if s.cfg.Node != nil {
		_, err := st.UpdateTemplate(ctx, b.TemplateID, func(t *templates.Template) error {
			delete(t.Tags, buildID)
			return nil
		})
		errs = append(errs, err)
		for _, p := range []string{s.cfg.Node.artifactPath(buildID), s.cfg.Node.snapshotArtifactPath(buildID)} {
			if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// legacyMarker is the file older versions of `warren serve` wrote into a
// sandbox snapshot's directory to mark it (the record says so now).
const legacyMarker = "warren-sandbox-snapshot.json"

// AdoptMarkers records, for each ready build of the catalog whose
// snapshot directory holds an older version's sandbox snapshot marker,
// that the build is a sandbox snapshot (templates.Build.SandboxSnapshot),
// so that the snapshots an upgraded `warren serve` took before are still
// listed, counted and refused a cold start. It returns how many it
// adopted.
func AdoptMarkers(ctx context.Context, cat *templates.Catalog) (int, error) {
	st := cat.Store()
	all, err := st.ListTemplates(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, t := range all {
		builds, err := st.ListBuilds(ctx, t.ID)
		if err != nil {
			return n, err
		}
		for _, b := range builds {
			if b.SandboxSnapshot != nil || b.SnapshotDir == "" {
				continue
			}
			raw, err := os.ReadFile(filepath.Join(b.SnapshotDir, legacyMarker))
			if err != nil {
				continue
			}
			var origin templates.SandboxSnapshotOrigin
			if json.Unmarshal(raw, &origin) != nil {
				continue
			}
			if _, err := st.UpdateBuild(ctx, b.ID, func(x *templates.Build) error {
				x.SandboxSnapshot = &origin
				return nil
			}); err != nil {
				return n, err
			}
			n++
		}
	}
	return n, nil
}
