package lifecycle

// unroutable takes sandbox id out of routing for its kill (Route refuses
// it, its cached route goes) and returns what puts it back, for a kill
// that failed (a killed sandbox is not found in the store anyway).
func (m *Manager) unroutable(id string) func() {
	m.killMu.Lock()
	if m.killing == nil {
		m.killing = map[string]struct{}{}
	}
	m.killing[id] = struct{}{}
	m.killMu.Unlock()
	if m.routes != nil {
		m.routes.changed(id)
	}
	return func() {
		m.killMu.Lock()
		delete(m.killing, id)
		m.killMu.Unlock()
	}
}

// beingKilled reports whether the kill of sandbox id has begun and not
// failed (unroutable).
func (m *Manager) beingKilled(id string) bool {
	m.killMu.Lock()
	defer m.killMu.Unlock()
	_, ok := m.killing[id]
	return ok
}
