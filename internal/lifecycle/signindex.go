package lifecycle

import (
	"context"
	"sync"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/sandbox"
	"github.com/warren-sandbox/warren/internal/store"
)

// maxSignDirty is how many changed sandboxes the signature index reads one
// by one; past it, one list of the signable sandboxes is cheaper.
const maxSignDirty = 256

// signIndex keeps in memory the envd access tokens of the sandboxes a
// signed /files URL may reach (running ones, and paused ones that traffic
// wakes), for SandboxBySignature: the SDK's signed URLs name no sandbox in
// plain-http mode, so the sandbox is the one whose token makes the
// signature valid, and finding it must not read the store per request.
// The change feed (Config.SandboxChanges) marks the sandboxes whose row
// changed; a lookup re-reads those (one read per change, not per request)
// and a full load happens only when the feed starts or loses changes.
type signIndex struct {
	refresh sync.Mutex // one refresh at a time

	mu sync.RWMutex
	// live is set while the change feed is in effect; without it the
	// index is not used.
	live   bool
	full   bool                // the next refresh lists every signable sandbox
	dirty  map[string]struct{} // changed since the last refresh
	tokens map[string]string   // sandbox ID → envd access token
}

func newSignIndex() *signIndex {
	return &signIndex{dirty: map[string]struct{}{}, tokens: map[string]string{}}
}

// changed marks id's row as changed; "" means changes may have been
// missed (store.SQL.WatchSandboxes): everything is read again.
func (x *signIndex) changed(id string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if id == "" {
		x.live, x.full = true, true
		clear(x.dirty)
		return
	}
	if x.full {
		return
	}
	x.dirty[id] = struct{}{}
	if len(x.dirty) > maxSignDirty {
		x.full = true
		clear(x.dirty)
	}
}

// stop marks the feed as gone: lookups read the store again.
func (x *signIndex) stop() {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.live = false
	clear(x.dirty)
	clear(x.tokens)
}

// signable returns the token by which a signed URL may reach sb, or "".
func signable(sb *store.Sandbox) string {
	switch {
	case sb.State == sandbox.StateRunning:
	case sb.State == sandbox.StatePaused && sb.Spec.AutoResume && sb.Spec.PausedWithMemory:
	default:
		return ""
	}
	return sb.Spec.EnvdAccessToken
}

// signableFilter lists the states signable accepts.
var signableFilter = store.SandboxFilter{States: []sandbox.State{sandbox.StateRunning, sandbox.StatePaused}}

// SandboxBySignature returns the ID of the sandbox a signed /files URL
// reaches, the one whose envd access token makes valid true, or "" when
// none does. Only running sandboxes and paused ones that traffic may wake
// are tried; nothing is woken here. With a change feed the tokens are
// held in memory and a lookup reads the store only for rows changed since
// the last one; valid is called once per candidate sandbox (each a hash:
// the signature binds no sandbox ID, so no index can skip them).
func (m *Manager) SandboxBySignature(ctx context.Context, valid func(token string) bool) (string, error) {
	x := m.signs
	x.mu.RLock()
	live := x.live
	x.mu.RUnlock()
	if !live {
		return m.scanBySignature(ctx, valid)
	}
	if err := m.refreshSigns(ctx); err != nil {
		return "", err
	}
	x.mu.RLock()
	defer x.mu.RUnlock()
	for id, tok := range x.tokens {
		if valid(tok) {
			return id, nil
		}
	}
	return "", nil
}

// scanBySignature is SandboxBySignature from the store, without the feed.
func (m *Manager) scanBySignature(ctx context.Context, valid func(token string) bool) (string, error) {
	sbs, err := m.st.ListSandboxes(ctx, signableFilter)
	if err != nil {
		return "", err
	}
	for _, sb := range sbs {
		if tok := signable(sb); tok != "" && valid(tok) {
			return sb.ID, nil
		}
	}
	return "", nil
}

// refreshSigns brings the index up to the changes told so far.
func (m *Manager) refreshSigns(ctx context.Context) error {
	x := m.signs
	x.refresh.Lock()
	defer x.refresh.Unlock()
	x.mu.Lock()
	full, dirty := x.full, x.dirty
	x.full, x.dirty = false, map[string]struct{}{}
	x.mu.Unlock()
	if full {
		sbs, err := m.st.ListSandboxes(ctx, signableFilter)
		if err != nil {
			x.changed("")
			return err
		}
		tokens := make(map[string]string, len(sbs))
		for _, sb := range sbs {
			if tok := signable(sb); tok != "" {
				tokens[sb.ID] = tok
			}
		}
		// Changes told while listing are marked again and read next time.
		x.mu.Lock()
		x.tokens = tokens
		x.mu.Unlock()
		return nil
	}
	for id := range dirty {
		sb, err := m.st.GetSandbox(ctx, id)
		tok := ""
		switch {
		case err == nil:
			tok = signable(sb)
		case !errdefs.IsNotFound(err):
			x.mu.Lock()
			for id := range dirty {
				x.dirty[id] = struct{}{}
			}
			x.mu.Unlock()
			return err
		}
		x.mu.Lock()
		if tok != "" {
			x.tokens[id] = tok
		} else {
			delete(x.tokens, id)
		}
		x.mu.Unlock()
		delete(dirty, id)
	}
	return nil
}
