package lifecycle

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/sandbox"
	"github.com/warren-sandbox/warren/internal/store"
)

// Create starts a sandbox and returns its record once it runs. A team over
// its concurrency limit gets an ErrExhausted error wrapped in LimitError.
//
// A Manager of one node (not AllNodes) writes the store once, after the
// node answers: the row is inserted running, with its created event, in
// one transaction. Until then the sandbox is known only to this Manager
// (pending: a Kill meanwhile is carried out when the node answers) and to
// the node; a crash in between leaves a node sandbox without a row, which
// the next Reconcile kills as an orphan. A Manager of every node (API
// replicas with placement) inserts a starting row first, which placement
// and the other replicas count and see, then marks it running.
func (m *Manager) Create(ctx context.Context, p CreateParams) (*store.Sandbox, error) {
	now := time.Now().UTC()
	id, pooled := m.poolID(p)
	m.beginStart(id)
	defer m.endStart(id)
	sb := &store.Sandbox{
		ID: id, TeamID: p.TeamID, TemplateID: p.Template.ID, State: sandbox.StateStarting,
		Epoch: 1, StartedAt: now, EndAt: now.Add(p.Timeout),
		Spec: store.Spec{
			Alias: p.Alias, BuildID: p.Template.BuildID, NodeID: m.cfg.NodeID, ExecutionID: sandbox.NewExecutionID(),
			Resources: p.Resources, Metadata: maps.Clone(p.Metadata), AutoPause: p.AutoPause,
			AutoPauseMemory: p.AutoPauseMemory, AutoResume: p.AutoResume, AllowInternet: p.AllowInternet,
			Network: p.Network, VolumeMounts: p.VolumeMounts,
		},
	}
	if p.Secure {
		sb.Spec.EnvdAccessToken = sandbox.RandomToken(32)
	}
	if p.TrafficToken {
		sb.Spec.TrafficAccessToken = sandbox.RandomToken(32)
	}
	if m.cfg.AllNodes {
		return m.createTwoWrites(ctx, p, sb, pooled)
	}
	return m.createOneWrite(ctx, p, sb, pooled)
}

// nodeCreate asks the node to start sb, with its timeout: the node arms
// its end time at ready + Timeout itself (docs/lifecycle.md §2).
func (m *Manager) nodeCreate(ctx context.Context, p CreateParams, sb *store.Sandbox) (nodeapi.CreateRequest, *nodeapi.Sandbox, error) {
	req := nodeapi.CreateRequest{
		ID: sb.ID, ExecutionID: sb.Spec.ExecutionID, TeamID: sb.TeamID, Template: p.Template,
		Resources: p.Resources, EndAt: sb.EndAt, Timeout: p.Timeout, Network: p.Policy, EnvVars: p.EnvVars,
		EnvdAccessToken: sb.Spec.EnvdAccessToken, Metadata: p.Metadata, Volumes: p.Volumes,
	}
	ns, err := m.node.Create(ctx, req)
	return req, ns, err
}

// markStarted sets what the node's answer ns says of the running sandbox s.
func markStarted(s *store.Sandbox, ns *nodeapi.Sandbox, timeout time.Duration) {
	s.State = sandbox.StateRunning
	s.Spec.EnvdVersion = ns.EnvdVersion
	if !ns.StartedAt.IsZero() {
		s.StartedAt = ns.StartedAt.UTC()
	}
	// The TTL counts from when the sandbox is ready, not from when it was
	// asked for: a slow start does not eat into it.
	s.EndAt = time.Now().UTC().Add(timeout)
}

// createOneWrite is Create's path with one store write, after the node
// answers.
func (m *Manager) createOneWrite(ctx context.Context, p CreateParams, sb *store.Sandbox, pooled bool) (*store.Sandbox, error) {
	if err := m.admit(ctx, sb.TeamID, p.MaxConcurrent); err != nil {
		m.unpool(sb.ID, pooled)
		return nil, err
	}
	// The slot admit took is given back by record, in the critical
	// section of the write that stores the row holding it, or below when
	// no row is stored running.
	m.addPending(sb.ID, sb.TeamID, sb.Spec.ExecutionID)
	log := m.log.With("sandbox_id", sb.ID, "team_id", sb.TeamID, "template_id", sb.TemplateID)
	req, ns, err := m.nodeCreate(ctx, p, sb)
	if err != nil {
		m.takePending(sb.ID)
		m.unadmit(sb.TeamID, p.MaxConcurrent)
		return nil, fmt.Errorf("create sandbox %q: %w", sb.ID, nodeFailure(err))
	}
	unlock := m.lock(sb.ID)
	killed := m.takePending(sb.ID)
	if killed != "" {
		m.unadmit(sb.TeamID, p.MaxConcurrent)
		err = m.recordKilledStart(ctx, sb, killed)
	} else {
		markStarted(sb, ns, p.Timeout)
		err = m.record(ctx, sb, newEvent(sb, store.EventCreated), p.MaxConcurrent)
	}
	unlock()
	if killed != "" || err != nil {
		reason := sandbox.KillRequest
		if killed != "" {
			reason = killed
			log = log.With("kill_reason", reason.String())
			log.Info("sandbox killed while starting", "execution_id", sb.Spec.ExecutionID)
		} else if !errdefs.IsExhausted(err) {
			log.Warn("record created sandbox; stopping it on its node", "error", err)
		}
		m.stopUnrecorded(ctx, sb, reason, log)
		if err == nil {
			err = errdefs.Publicf(errdefs.ErrConflict, "sandbox %q was killed while starting", sb.ID)
		}
		return nil, fmt.Errorf("create sandbox: %w", err)
	}
	return m.created(ctx, sb, req, ns, log), nil
}

// stopUnrecorded kills the execution of sb the node started, which is not
// recorded running, for reason. One it fails to stop is an orphan to the
// next reconcile.
func (m *Manager) stopUnrecorded(ctx context.Context, sb *store.Sandbox, reason sandbox.KillReason, log *slog.Logger) {
	ctx = context.WithoutCancel(ctx)
	var err error
	if ek, ok := m.node.(nodeapi.ExecutionKiller); ok {
		err = ek.KillExecution(ctx, sb.ID, sb.Spec.ExecutionID, reason)
	} else {
		err = m.node.Kill(ctx, sb.ID, reason)
	}
	if err != nil && !errdefs.IsNotFound(err) {
		log.Warn("stop sandbox not recorded running", "error", err)
	}
}

// recordKilledStart stores sandbox sb, killed for reason while the node
// started it, with its killed event.
func (m *Manager) recordKilledStart(ctx context.Context, sb *store.Sandbox, reason sandbox.KillReason) error {
	sb.State, sb.KillReason, sb.KilledAt = sandbox.StateKilled, reason, time.Now().UTC()
	e := newEvent(sb, store.EventKilled)
	e.Reason = reason
	if err := m.st.RecordSandbox(context.WithoutCancel(ctx), sb, e, 0); err != nil {
		return err
	}
	m.killed.WithLabelValues(reason.String()).Inc()
	return nil
}

// createTwoWrites is Create's path with a starting row inserted before the
// node call and marked running after it.
func (m *Manager) createTwoWrites(ctx context.Context, p CreateParams, sb *store.Sandbox, pooled bool) (*store.Sandbox, error) {
	if err := m.reserve(ctx, sb, p.MaxConcurrent); err != nil {
		m.unpool(sb.ID, pooled)
		return nil, err
	}
	log := m.log.With("sandbox_id", sb.ID, "team_id", sb.TeamID, "template_id", sb.TemplateID)
	req, ns, err := m.nodeCreate(ctx, p, sb)
	if err != nil {
		// The sandbox never ran: forget it rather than list a corpse.
		if derr := m.st.DeleteSandbox(context.WithoutCancel(ctx), sb.ID); derr != nil {
			log.Warn("forget failed sandbox", "error", derr)
		}
		return nil, fmt.Errorf("create sandbox %q: %w", sb.ID, nodeFailure(err))
	}
	sb, err = m.st.TransitionSandbox(context.WithoutCancel(ctx), sb.ID, func(s *store.Sandbox) (*store.Event, error) {
		if s.State != sandbox.StateStarting {
			return nil, errdefs.Publicf(errdefs.ErrConflict, "sandbox %q is %s", s.ID, s.State)
		}
		markStarted(s, ns, p.Timeout)
		return newEvent(s, store.EventCreated), nil
	})
	if err != nil {
		// Killed while starting (e.g. by a concurrent DELETE): stop it.
		m.node.Kill(context.WithoutCancel(ctx), ns.ID, sandbox.KillRequest)
		return nil, fmt.Errorf("create sandbox: %w", err)
	}
	return m.created(ctx, sb, req, ns, log), nil
}

// created arms the end time of sb, running since the node's answer ns to
// req.
func (m *Manager) created(ctx context.Context, sb *store.Sandbox, req nodeapi.CreateRequest, ns *nodeapi.Sandbox, log *slog.Logger) *store.Sandbox {
	// The node armed its backstop at its own ready + Timeout, no later
	// than the end time just stored (docs/lifecycle.md §2); a node that
	// answers the EndAt it was given does not know Timeout and is told.
	if ns.EndAt.Equal(req.EndAt) {
		if err := m.node.SetEndTime(context.WithoutCancel(ctx), sb.ID, sb.EndAt); err != nil {
			log.Warn("node set end time", "error", err)
		}
	}
	m.arm(sb.ID, sb.Spec.ExecutionID, sb.EndAt)
	log.Info("sandbox created", "execution_id", sb.Spec.ExecutionID, "end_at", sb.EndAt)
	return sb
}

// LimitError is returned by Create when a team is at its concurrency
// limit. It wraps errdefs.ErrExhausted.
type LimitError struct{ Limit int }

func (e *LimitError) Error() string {
	return fmt.Sprintf("you have reached the maximum number of concurrent sandboxes (%d); kill a sandbox or ask for a higher limit", e.Limit)
}

// Unwrap makes LimitError an ErrExhausted.
func (e *LimitError) Unwrap() error { return errdefs.ErrExhausted }

// PublicMessage is what a client is told: Error, which names only the
// team's own limit (errdefs.Public).
func (e *LimitError) PublicMessage() string { return e.Error() }

// reserve inserts sb's starting row within the team's limit.
func (m *Manager) reserve(ctx context.Context, sb *store.Sandbox, limit int) error {
	if limit <= 0 {
		return m.st.CreateSandbox(ctx, sb)
	}
	// The store counts and inserts in one transaction serialized per team
	// across processes (API replicas on one Postgres); createMu spares
	// this process's creates the database's lock waits.
	m.createMu.Lock()
	defer m.createMu.Unlock()
	within := limit - m.resuming[sb.TeamID] // slots resumes hold
	if within <= 0 {
		return &LimitError{Limit: limit}
	}
	err := m.st.CreateSandboxWithin(ctx, sb, within, store.ActiveStates...)
	if errdefs.IsExhausted(err) {
		return &LimitError{Limit: limit}
	}
	return err
}

// admit takes one of the team's concurrency slots for a create whose row
// is not stored yet: the store's count (a read), plus the creates admitted
// and the resumes in progress in this Manager, must be under limit.
func (m *Manager) admit(ctx context.Context, teamID string, limit int) error {
	if limit <= 0 {
		return nil
	}
	m.createMu.Lock()
	defer m.createMu.Unlock()
	n, err := m.st.CountSandboxes(ctx, teamID, store.ActiveStates...)
	if err != nil {
		return fmt.Errorf("create sandbox: %w", err)
	}
	if n+m.admitted[teamID]+m.resuming[teamID] >= limit {
		return &LimitError{Limit: limit}
	}
	m.admitted[teamID]++
	return nil
}

// unadmit gives back the slot admit took.
func (m *Manager) unadmit(teamID string, limit int) {
	if limit <= 0 {
		return
	}
	m.createMu.Lock()
	defer m.createMu.Unlock()
	m.unadmitLocked(teamID)
}

// unadmitLocked is unadmit with createMu held.
func (m *Manager) unadmitLocked(teamID string) {
	if m.admitted[teamID]--; m.admitted[teamID] <= 0 {
		delete(m.admitted, teamID)
	}
}

// record inserts sb with its event e within the team's limit, counting in
// the store and, besides this create's own slot, the other admitted
// creates and resumes of this Manager (a second process on the same store
// may have taken the slot since admit: ErrExhausted). It gives back the
// slot admit took under the same lock: once the row is stored the store
// counts it, and counted twice it would refuse another create's write.
func (m *Manager) record(ctx context.Context, sb *store.Sandbox, e *store.Event, limit int) error {
	ctx = context.WithoutCancel(ctx)
	if limit <= 0 {
		return m.st.RecordSandbox(ctx, sb, e, 0)
	}
	m.createMu.Lock()
	defer m.createMu.Unlock()
	within := limit - m.resuming[sb.TeamID] - (m.admitted[sb.TeamID] - 1)
	err := m.st.RecordSandbox(ctx, sb, e, max(within, 1), store.ActiveStates...)
	m.unadmitLocked(sb.TeamID)
	if errdefs.IsExhausted(err) {
		return &LimitError{Limit: limit}
	}
	return err
}

// addPending records that this Manager starts execution executionID of
// sandbox id of team teamID without a row yet.
func (m *Manager) addPending(id, teamID, executionID string) {
	m.startMu.Lock()
	defer m.startMu.Unlock()
	m.pending[id] = &pendingCreate{teamID: teamID, executionID: executionID}
}

// takePending forgets pending sandbox id and returns the reason it was
// killed for while starting ("" if it was not).
func (m *Manager) takePending(id string) sandbox.KillReason {
	m.startMu.Lock()
	defer m.startMu.Unlock()
	pc := m.pending[id]
	delete(m.pending, id)
	if pc == nil {
		return ""
	}
	return pc.killed
}

// killPending marks pending sandbox id of team teamID ("" for any) and
// execution executionID ("" for any) killed for reason, carried out when
// its node answers; false if no such create is pending. The caller holds
// id's lock.
func (m *Manager) killPending(teamID, id, executionID string, reason sandbox.KillReason) bool {
	m.startMu.Lock()
	defer m.startMu.Unlock()
	pc := m.pending[id]
	if pc == nil || pc.killed != "" || (teamID != "" && pc.teamID != teamID) || (executionID != "" && pc.executionID != executionID) {
		return false
	}
	pc.killed = reason
	return true
}

// pendingCreate is a create of one write between admission and its row.
type pendingCreate struct {
	teamID, executionID string
	killed              sandbox.KillReason // "" unless killed while starting
}
