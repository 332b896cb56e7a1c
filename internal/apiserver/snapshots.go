package apiserver

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/errdefs/errhttp"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/sandbox"
	"github.com/warren-sandbox/warren/internal/templates"
)

// Sandbox snapshots (E2B's POST /sandboxes/{id}/snapshots, GET
// /snapshots). A snapshot is a template of the team whose one build holds
// the sandbox's memory image and a saved copy of its writable layer, over
// the root filesystem of the sandbox's own template
// (templates.Build.SandboxSnapshot); creating a sandbox with the
// snapshot's ID as templateID restores it. DELETE /templates/{id} deletes
// it. The snapshot is taken through the node contract
// (lifecycle.Manager.Snapshot, nodeapi.SandboxSnapshotter) by the node
// that runs the sandbox, which keeps it as that build: under `warren api`
// another node pulls the build, its snapshot checked against the digests
// recorded here, as template builds travel. Snapshots need nodes whose
// driver checkpoints memory (runsc); elsewhere the create answers 501.

// snapshotJSON is SnapshotInfo.
type snapshotJSON struct {
	SnapshotID string   `json:"snapshotID"`
	Names      []string `json:"names"`
}

func (s *Server) createSnapshot(w http.ResponseWriter, r *http.Request, c *caller) error {
	if c.teamID == "" {
		return errdefs.Publicf(errdefs.ErrInvalid, "an admin taking a snapshot must name the sandbox's team in X-Team-ID")
	}
	id := r.PathValue("id")
	var req struct {
		Name string `json:"name"`
	}
	if err := decode(r, &req, false); err != nil {
		return err
	}
	ctx := r.Context()
	sb, err := s.lc.Get(ctx, c.teamID, id)
	if err != nil {
		return sandboxErr(id, err)
	}
	if !s.lc.CanSnapshot() || s.cfg.Catalog == nil {
		return errdefs.Publicf(errdefs.ErrUnsupported, "snapshots are not supported by this server (they need the runsc driver)")
	}
	if sb.State != sandbox.StateRunning {
		return errdefs.Publicf(errdefs.ErrConflict, "sandbox %q is not running", id)
	}
	release, err := s.reserveSnapshot(ctx, c.teamID, s.limits(c).MaxSnapshots)
	if err != nil {
		return err
	}
	defer release()
	alias, tag := "", templates.DefaultTag
	if req.Name != "" {
		alias, tag = templates.ParseRef(req.Name)
		if alias, err = templates.TeamName(c.teamID, alias); err != nil {
			return err
		}
	}
	cat, st := s.cfg.Catalog, s.cfg.Catalog.Store()
	now := time.Now().UTC()
	res := sb.Spec.Resources
	var t *templates.Template
	created := false
	if alias != "" {
		t, err = st.TemplateByAlias(ctx, c.teamID, alias)
		switch {
		case errdefs.IsNotFound(err):
			t = nil
		case err != nil:
			return err
		}
	}
	if t == nil {
		t = &templates.Template{
			ID: templates.NewTemplateID(), TeamID: c.teamID, Tags: map[string]templates.Tag{},
			CPUCount: res.VCPUs, MemoryMB: res.MemoryMB, DiskMB: res.DiskMB, CreatedAt: now, UpdatedAt: now,
		}
		if alias != "" {
			t.Aliases = []string{alias}
		}
		if err := st.CreateTemplate(ctx, t); err != nil {
			return err
		}
		created = true
	}
	b := &templates.Build{
		ID: templates.NewBuildID(), TemplateID: t.ID, Status: templates.BuildBuilding, Tags: []string{tag},
		CPUCount: res.VCPUs, MemoryMB: res.MemoryMB, DiskMB: res.DiskMB, CreatedAt: now, UpdatedAt: now,
		SandboxSnapshot: &templates.SandboxSnapshotOrigin{SandboxID: id, TeamID: c.teamID, CreatedAt: now, VolumePaths: volumePathsOf(sb)},
	}
	// The source's tree is named from the start: this build in progress
	// then keeps it from the template collector even if the source
	// sandbox ends before the snapshot is recorded (`warren serve`, whose
	// catalog is its node's; under `warren api` the record names no tree).
	if src, err := cat.Build(ctx, sb.Spec.BuildID); err == nil {
		b.RootFSDir = src.RootFSDir
	}
	undo := func(cause error) {
		cctx := context.WithoutCancel(ctx)
		if created {
			if err := st.DeleteTemplate(cctx, t.ID); err != nil {
				s.log.Warn("remove template of failed snapshot", "template_id", t.ID, "error", err)
			}
			return
		}
		cat.FinishBuild(cctx, b.ID, &templates.Reason{Message: errhttp.Message(cause), Step: "snapshot"})
	}
	if err := st.CreateBuild(ctx, b); err != nil {
		undo(err)
		return err
	}
	snap, nodeID, err := s.lc.Snapshot(ctx, c.teamID, id, nodeapi.SnapshotRequest{TeamID: c.teamID, TemplateID: t.ID, BuildID: b.ID})
	if err != nil {
		// A node that took it though its answer was lost (the client went
		// away, the connection broke) deletes it.
		if derr := s.lc.DeleteSnapshot(context.WithoutCancel(ctx), b.ID); derr != nil && !errdefs.IsNotFound(derr) && !errdefs.IsUnsupported(derr) {
			s.log.Warn("delete the failed snapshot on its node", "sandbox_id", id, "build_id", b.ID, "error", derr)
		}
		undo(err)
		switch {
		case errdefs.IsUnsupported(err):
			return errdefs.WithMessage(err, "snapshots need a runtime driver with memory checkpoint (runsc); this node's driver has none")
		case errdefs.IsConflict(err):
			return errdefs.WithMessage(err, fmt.Sprintf("sandbox %q is not running", id))
		}
		return sandboxErr(id, err)
	}
	src := snap.Source
	_, err = cat.UpdateBuild(ctx, b.ID, func(x *templates.Build) error {
		x.Env, x.User, x.Workdir, x.StartCmd, x.EnvdVersion = src.Env, src.User, src.Workdir, src.StartCmd, sb.Spec.EnvdVersion
		// The node that holds the snapshot, and its artifacts as the
		// others pull them (warren api).
		x.NodeID = nodeID
		x.RootFSSHA256, x.RootFSSize = snap.RootFS.SHA256, snap.RootFS.Size
		if snap.Travels() {
			host := *snap.Host
			x.SnapshotSHA256, x.SnapshotSize, x.SnapshotHost = snap.Snapshot.SHA256, snap.Snapshot.Size, &host
		}
		return nil
	})
	if err == nil {
		_, err = cat.FinishBuild(ctx, b.ID, nil)
	}
	if err != nil {
		if derr := s.lc.DeleteSnapshot(context.WithoutCancel(ctx), b.ID); derr != nil {
			s.log.Warn("delete the unrecorded snapshot on its node", "sandbox_id", id, "build_id", b.ID, "error", derr)
		}
		undo(err)
		return err
	}
	out := snapshotOf(t, alias, tag)
	if err := s.lc.Checkpointed(context.WithoutCancel(ctx), c.teamID, id, out.SnapshotID); err != nil {
		s.log.Warn("record sandbox snapshot event", "sandbox_id", id, "error", err)
	}
	s.log.Info("sandbox snapshot", "sandbox_id", id, "template_id", t.ID, "build_id", b.ID, "node_id", nodeID, "travels", snap.Travels())
	writeJSON(w, http.StatusCreated, out)
	return nil
}

// snapshotOf names snapshot template t's build behind tag.
func snapshotOf(t *templates.Template, alias, tag string) snapshotJSON {
	if alias == "" {
		return snapshotJSON{SnapshotID: t.ID + ":" + tag, Names: []string{}}
	}
	return snapshotJSON{SnapshotID: alias + ":" + tag, Names: []string{alias + ":" + tag}}
}

// readSnapshotInfo returns where a ready sandbox snapshot's build comes
// from; false for any other build.
func readSnapshotInfo(b *templates.Build) (*templates.SandboxSnapshotOrigin, bool) {
	if b.SandboxSnapshot == nil || b.Status != templates.BuildReady {
		return nil, false
	}
	return b.SandboxSnapshot, true
}

// countSnapshots counts a team's recorded snapshots (builds holding a
// sandbox snapshot); reserveSnapshot adds those in progress.
func (s *Server) countSnapshots(ctx context.Context, teamID string) (int, error) {
	all, err := s.cfg.Catalog.List(ctx, teamID)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, t := range all {
		builds, err := s.cfg.Catalog.Builds(ctx, t.ID)
		if err != nil {
			return 0, err
		}
		for _, b := range builds {
			if _, ok := readSnapshotInfo(b); ok {
				n++
			}
		}
	}
	return n, nil
}

func (s *Server) listSnapshots(w http.ResponseWriter, r *http.Request, c *caller) error {
	q := r.URL.Query()
	if v := q.Get("limit"); v != "" {
		if _, err := parseLimit(v); err != nil {
			return err
		}
	}
	if s.cfg.Catalog == nil || c.teamID == "" {
		if _, err := pageOf(w, r, []snapshotJSON{}); err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, []snapshotJSON{})
		return nil
	}
	ctx := r.Context()
	sandboxID, name := q.Get("sandboxID"), q.Get("name")
	all, err := s.cfg.Catalog.List(ctx, c.teamID)
	if err != nil {
		return err
	}
	type item struct {
		snapshotJSON
		at time.Time
	}
	var items []item
	for _, t := range all {
		builds, err := s.cfg.Catalog.Builds(ctx, t.ID)
		if err != nil {
			return err
		}
		for _, b := range builds {
			info, ok := readSnapshotInfo(b)
			if !ok || (sandboxID != "" && info.SandboxID != sandboxID) {
				continue
			}
			var tags []string
			for tg, ref := range t.Tags {
				if ref.BuildID == b.ID {
					tags = append(tags, tg)
				}
			}
			if len(tags) == 0 {
				continue // no tag reaches this build any more
			}
			slices.Sort(tags)
			if i := slices.Index(tags, templates.DefaultTag); i > 0 {
				tags[0], tags[i] = tags[i], tags[0]
			}
			alias := ""
			if len(t.Aliases) > 0 {
				alias = t.Aliases[0]
			}
			if name != "" && !matchesName(t, tags, name) {
				continue
			}
			it := item{snapshotJSON: snapshotOf(t, alias, tags[0]), at: info.CreatedAt}
			if alias != "" {
				it.Names = it.Names[:0]
				for _, tg := range tags {
					it.Names = append(it.Names, alias+":"+tg)
				}
			}
			items = append(items, it)
		}
	}
	slices.SortStableFunc(items, func(a, b item) int { return b.at.Compare(a.at) }) // newest first
	out := make([]snapshotJSON, len(items))
	for i, it := range items {
		out[i] = it.snapshotJSON
	}
	page, err := pageOf(w, r, out)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, page)
	return nil
}

// matchesName reports whether name ("alias" or "alias:tag", or the
// template ID) names the snapshot template t with tags.
func matchesName(t *templates.Template, tags []string, name string) bool {
	n, tag, hasTag := strings.Cut(name, ":")
	if n != t.ID && !slices.Contains(t.Aliases, n) {
		return false
	}
	return !hasTag || slices.Contains(tags, tag)
}
