package lifecycle

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/route"
	"github.com/warren-sandbox/warren/internal/sandbox"
)

// routeNetwork is what routing reads of a sandbox's network document.
type routeNetwork struct {
	MaskRequestHost string `json:"maskRequestHost"`
	HTTPSPorts      []int  `json:"httpsPorts"`
}

// Route finds where a sandbox's traffic goes, resuming a paused sandbox
// that allows auto-resume. admit, when not nil, is called first with the
// sandbox's tokens and state; its error is returned as is and nothing is
// resumed, so a request without the right token never wakes a sandbox. A
// missing or killed sandbox is ErrNotFound, and so is one whose kill has
// begun (upstream takes a sandbox out of routing before it stops it: the
// SDK's health check reads the proxy's 502 as "killed", where a request
// to a sandbox being torn down would hang).
func (m *Manager) Route(ctx context.Context, id string, admit func(*route.Admission) error) (*route.Route, error) {
	cached, gen, ok := m.routes.get(id)
	// After the cache's generation is read: a kill that begins later
	// evicts, so what this lookup reads is not cached.
	if m.beingKilled(id) {
		return nil, errdefs.Publicf(errdefs.ErrNotFound, "sandbox %q is being killed", id)
	}
	if ok {
		if admit != nil {
			if err := admit(&route.Admission{SandboxID: id, EnvdAccessToken: cached.EnvdAccessToken, TrafficAccessToken: cached.TrafficAccessToken}); err != nil {
				return nil, err
			}
		}
		return cached, nil
	}
	sb, err := m.Get(ctx, "", id)
	if err != nil {
		return nil, err
	}
	paused := sb.State == sandbox.StatePaused || sb.State == sandbox.StatePausing
	if admit != nil {
		a := &route.Admission{SandboxID: id, EnvdAccessToken: sb.Spec.EnvdAccessToken, TrafficAccessToken: sb.Spec.TrafficAccessToken,
			Paused: paused, CanAutoResume: paused && sb.Spec.AutoResume && (sb.Spec.PausedWithMemory || sb.State == sandbox.StatePausing)}
		if err := admit(a); err != nil {
			return nil, err
		}
	}
	if paused {
		if !sb.Spec.AutoResume || !sb.Spec.PausedWithMemory && sb.State == sandbox.StatePaused {
			return nil, fmt.Errorf("sandbox %q: %w: %w", id, route.ErrPaused, errdefs.ErrConflict)
		}
		unlock := m.lock(id)
		sb, err = m.Get(ctx, "", id)
		if err == nil && sb.State == sandbox.StatePaused && !sb.Spec.PausedWithMemory {
			err = fmt.Errorf("sandbox %q: %w: %w", id, route.ErrPaused, errdefs.ErrConflict)
		}
		if err == nil && sb.State == sandbox.StatePaused {
			sb, err = m.resumeLocked(ctx, sb, m.cfg.AutoResumeTimeout)
			if err == nil {
				m.log.Info("sandbox auto-resumed by traffic", "sandbox_id", id)
			}
		}
		unlock()
		if err != nil {
			return nil, err
		}
	}
	if sb.State != sandbox.StateRunning {
		return nil, errdefs.Publicf(errdefs.ErrUnavailable, "sandbox %q is %s", id, sb.State)
	}
	ns, err := m.node.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	var nw routeNetwork
	if len(sb.Spec.Network) > 0 {
		_ = json.Unmarshal(sb.Spec.Network, &nw) // written by the API; a bad document routes plainly
	}
	r := &route.Route{SandboxID: id, TeamID: sb.TeamID, Address: ns.Address, Host: ns.Host,
		EnvdAccessToken: sb.Spec.EnvdAccessToken, TrafficAccessToken: sb.Spec.TrafficAccessToken, Woken: paused,
		MaskRequestHost: nw.MaskRequestHost, HTTPSPorts: nw.HTTPSPorts, NodeProxy: ns.NodeProxy, NodeID: sb.Spec.NodeID, Epoch: ns.Epoch}
	if !paused {
		m.routes.put(gen, r)
	}
	return r, nil
}
