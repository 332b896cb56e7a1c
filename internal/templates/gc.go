package templates

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Garbage collection of build files: the catalog's part.
//
// The catalog decides which build directories (DataDir/builds/<buildID>:
// the unpacked root filesystem, the snapshot on ready) its own records no
// longer need; the collector (builder.Collector) adds what only the node
// and the build engine know (sandboxes, builds in progress), waits out a
// grace period and removes them. A build directory is needed by the
// catalog while its build
//
//   - is waiting or building (a build in progress writes there);
//   - is ready and a tag of its template points at it;
//   - holds a tree or snapshot that a needed build names as its
//     RootFSDir or SnapshotDir (a sandbox snapshot's build has its
//     source's tree as RootFSDir: the source build is kept for it).
//
// Everything else is a candidate: a ready build no tag points at any more
// (superseded: its template was rebuilt, or the base tar changed), a
// failed build, and the directory of a build whose record is gone (its
// template was deleted; Delete leaves the files where sandboxes expect
// them). A build made FROM another template has a tree of its own (hard
// links or copies: layer.Flatten), so a finished derived template does
// not keep its parent's build; a derived build in progress does, through
// the build engine.

// GCReason tells why a build directory is a candidate for collection.
type GCReason string

// Reasons.
const (
	// GCSuperseded is a ready build that no tag points at.
	GCSuperseded GCReason = "superseded"
	// GCDeleted is the directory of a build whose template was deleted.
	GCDeleted GCReason = "deleted"
	// GCFailed is a failed build's directory.
	GCFailed GCReason = "failed"
)

// GCCandidate is a build directory the catalog no longer needs.
type GCCandidate struct {
	// Dir is the build's directory (BuildDir, or an older version's
	// DataDir/deleted/<buildID>).
	Dir        string
	BuildID    string
	TemplateID string // empty when the record is gone
	Reason     GCReason
}

// GCPlan is the catalog's view for one collection.
type GCPlan struct {
	// Candidates are build directories no record needs.
	Candidates []GCCandidate
	// Templates are the IDs of the templates that exist (their uploaded
	// files stay).
	Templates map[string]bool
}

// BuildsDir is the directory that holds every build's directory.
func (c *Catalog) BuildsDir() string { return filepath.Join(c.cfg.DataDir, "builds") }

// TrashDir is where the collector moves build directories before it
// removes them: same file system, so the move is an atomic rename.
func (c *Catalog) TrashDir() string { return filepath.Join(c.cfg.DataDir, "trash") }

// PlanGC lists the build directories that no template record needs, and
// the templates that exist. The directories are listed before the records
// (a build's record is always made before its directory), so a directory
// made meanwhile is never taken for a deleted build's.
func (c *Catalog) PlanGC(ctx context.Context) (*GCPlan, error) {
	dirs, err := os.ReadDir(c.BuildsDir())
	if err != nil {
		return nil, fmt.Errorf("template gc: %w", err)
	}
	legacy, err := os.ReadDir(filepath.Join(c.cfg.DataDir, "deleted"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("template gc: %w", err)
	}
	all, err := c.store.ListTemplates(ctx)
	if err != nil {
		return nil, fmt.Errorf("template gc: %w", err)
	}
	plan := &GCPlan{Templates: map[string]bool{}}
	builds := map[string]*Build{}
	var kept []*Build
	for _, t := range all {
		plan.Templates[t.ID] = true
		tagged := map[string]bool{}
		for _, tg := range t.Tags {
			tagged[tg.BuildID] = true
		}
		bs, err := c.store.ListBuilds(ctx, t.ID)
		if err != nil {
			return nil, fmt.Errorf("template gc: %w", err)
		}
		for _, b := range bs {
			builds[b.ID] = b
			if b.Status == BuildWaiting || b.Status == BuildBuilding || (b.Status == BuildReady && tagged[b.ID]) {
				kept = append(kept, b)
			}
		}
	}
	// Build directories that kept builds reach into.
	reached := map[string]bool{}
	for _, b := range kept {
		reached[b.ID] = true
		for _, p := range []string{b.RootFSDir, b.SnapshotDir} {
			if id, ok := c.BuildOf(p); ok {
				reached[id] = true
			}
		}
	}
	for _, d := range dirs {
		id := d.Name()
		if !d.IsDir() || reached[id] || strings.HasPrefix(id, ".") {
			continue
		}
		cand := GCCandidate{Dir: c.BuildDir(id), BuildID: id}
		switch b, ok := builds[id]; {
		case !ok:
			// No record under an existing template: the template was
			// deleted (a crash in its deletion may have left the build's
			// record; the template's is gone first).
			if b, err := c.store.GetBuild(ctx, id); err == nil && plan.Templates[b.TemplateID] {
				continue // made after the templates were listed
			}
			cand.Reason = GCDeleted
		case b.Status == BuildError:
			cand.TemplateID, cand.Reason = b.TemplateID, GCFailed
		default:
			cand.TemplateID, cand.Reason = b.TemplateID, GCSuperseded
		}
		plan.Candidates = append(plan.Candidates, cand)
	}
	for _, d := range legacy {
		if reached[d.Name()] {
			continue
		}
		plan.Candidates = append(plan.Candidates, GCCandidate{
			Dir: filepath.Join(c.cfg.DataDir, "deleted", d.Name()), BuildID: d.Name(), Reason: GCDeleted,
		})
	}
	return plan, nil
}

// BuildOf returns the ID of the build whose directory holds p (a root
// filesystem tree or a snapshot directory), if p lies in one.
func (c *Catalog) BuildOf(p string) (string, bool) {
	if p == "" {
		return "", false
	}
	rel, err := filepath.Rel(c.BuildsDir(), filepath.Clean(p))
	if err != nil || rel == "." || strings.HasPrefix(rel, "..") {
		return "", false
	}
	id, _, _ := strings.Cut(rel, string(filepath.Separator))
	return id, true
}
