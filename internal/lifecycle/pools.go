package lifecycle

import (
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/sandbox"
)

// poolID chooses a new sandbox's ID: a ready member of the template's warm
// pool on the node when there is one (the node's Create then claims it,
// docs/lifecycle.md §6), a fresh ID otherwise.
func (m *Manager) poolID(p CreateParams) (string, bool) {
	if pl, ok := m.node.(nodeapi.Pooler); ok && len(p.Volumes) == 0 {
		if id, ok := pl.Reserve(p.Template, p.Resources); ok {
			return id, true
		}
	}
	return sandbox.NewID(), false
}

// unpool gives back a reserved member whose create did not go ahead.
func (m *Manager) unpool(id string, pooled bool) {
	if !pooled {
		return
	}
	if pl, ok := m.node.(nodeapi.Pooler); ok {
		pl.Unreserve(id)
	}
}
