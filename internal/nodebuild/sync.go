package nodebuild

import (
	"context"
	"maps"
	"time"

	nodepb "github.com/warren-sandbox/warren/api/node"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/templates"
)

// Sync keeps, of the builds this node copied from the control plane's
// catalog (its templates but the reserved system ones, which the node
// makes itself), those a create can still name there: the tags of each
// copied template are set to its builds the control plane has not let go.
// A build gone (its template deleted) or superseded (no tag points at it
// and one points at a build finished after it) loses its tag here, and
// the node's template collector frees its files after its grace period,
// unless a sandbox uses them. A build the control plane cannot answer for
// now, or has not tagged yet, keeps its tag. Without Locate there is
// nothing to ask.
func (n *Node) Sync(ctx context.Context) error {
	if n.cfg.Locate == nil {
		return nil
	}
	st := n.cfg.Catalog.Store()
	all, err := st.ListTemplates(ctx)
	if err != nil {
		return err
	}
	for _, t := range all {
		if templates.Reserved(t.ID) {
			continue
		}
		builds, err := st.ListBuilds(ctx, t.ID)
		if err != nil {
			return err
		}
		keep := map[string]templates.Tag{}
		for _, b := range builds {
			if b.Status != templates.BuildReady {
				continue
			}
			src, err := n.cfg.Locate(ctx, b.ID)
			switch {
			case errdefs.IsNotFound(err):
				n.log.Info("copied build gone from the control plane's catalog", "template_id", t.ID, "build_id", b.ID)
				continue
			case err != nil:
				n.log.Info("copied build kept: the control plane did not answer for it", "build_id", b.ID, "error", err)
			case superseded(src):
				n.log.Info("copied build superseded", "template_id", t.ID, "build_id", b.ID)
				continue
			}
			keep[b.ID] = templates.Tag{BuildID: b.ID, CreatedAt: b.FinishedAt}
		}
		if maps.Equal(keep, t.Tags) {
			continue
		}
		if _, err := st.UpdateTemplate(ctx, t.ID, func(t *templates.Template) error {
			t.Tags = keep
			return nil
		}); err != nil && !errdefs.IsNotFound(err) {
			return err
		}
	}
	return nil
}

// superseded reports whether src's build is untagged while a tag points
// at a build finished after it (as the control plane says, or as its
// records show).
func superseded(src *nodepb.BuildSource) bool {
	if src.GetCurrent() {
		return false
	}
	if src.GetSuperseded() {
		return true
	}
	finished := timeOf(src.GetBuild().GetFinishedAt())
	for _, tg := range src.GetTemplate().GetTags() {
		if timeOf(tg.GetCreatedAt()).After(finished) {
			return true
		}
	}
	return false
}

// SyncLoop runs Sync every interval until ctx ends.
func (n *Node) SyncLoop(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := n.Sync(ctx); err != nil {
			n.log.Warn("copied builds not synced with the control plane", "error", err)
		}
	}
}
