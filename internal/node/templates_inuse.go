package node

import (
	"context"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"slices"
)

// TemplatesInUse returns the template files every sandbox the agent keeps
// uses, whatever its state (starting, running, pausing, paused; forks,
// warm pool members, reserved members, the agent's internal snapshot
// sandboxes — which List leaves out), and the templates of its warm pools.
// It is a snapshot: see HoldTemplates to act on it before a new sandbox
// can appear. It implements nodeapi.TemplateHolder and never fails.
func (a *Agent) TemplatesInUse(context.Context) ([]nodeapi.TemplateUse, error) {
	var out []nodeapi.TemplateUse
	a.HoldTemplates(func(inUse []nodeapi.TemplateUse) { out = inUse })
	return out, nil
}

// HoldTemplates calls fn with TemplatesInUse while holding the agent's
// lock and the pools', under which every sandbox is registered (before
// its root filesystem is mounted or its snapshot read) and every warm pool
// is set.
// No sandbox can start using a template file while fn runs, so a file fn
// finds unused and moves out of its place (a rename) is never picked up
// half-removed: a create that registers later finds it missing and fails
// cleanly. fn must be quick and must not call the agent.
func (a *Agent) HoldTemplates(fn func(inUse []nodeapi.TemplateUse)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.pools.mu.Lock()
	defer a.pools.mu.Unlock()
	fn(a.templatesInUseLocked())
}

// templatesInUseLocked lists the templates in use; a.mu and a.pools.mu
// are held.
func (a *Agent) templatesInUseLocked() []nodeapi.TemplateUse {
	var out []nodeapi.TemplateUse
	add := func(sandboxID string, t nodeapi.Template) {
		if t.RootFS == "" && t.SnapshotDir == "" {
			return
		}
		out = append(out, nodeapi.TemplateUse{TemplateID: t.ID, BuildID: t.BuildID, RootFS: t.RootFS, SnapshotDir: t.SnapshotDir, SandboxID: sandboxID})
	}
	for id, h := range a.sandboxes {
		add(id, h.template())
	}
	// Reserved pool members are out of the map until claimed or put back.
	for id, h := range a.pools.reserved {
		add(id, h.template())
	}
	for _, p := range a.pools.byTmpl {
		add("", p.tmpl)
		for _, h := range p.ready {
			add(h.id, h.template())
		}
	}
	slices.SortFunc(out, func(x, y nodeapi.TemplateUse) int {
		switch {
		case x.SandboxID < y.SandboxID:
			return -1
		case x.SandboxID > y.SandboxID:
			return 1
		}
		return 0
	})
	return out
}
