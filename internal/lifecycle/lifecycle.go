// Package lifecycle owns the life of every sandbox on the control plane
// side: create, kill, pause, resume and connect, end-time changes, the TTL
// evictor (kill with reason timeout, or auto-pause), auto-resume when
// traffic reaches a paused sandbox, and the node's own events.
//
// States and transitions (internal/sandbox):
//
//	starting ──▶ running ──▶ pausing ──▶ paused
//	               ▲  ▲          │          │
//	               │  └─ refused ┘          │
//	               └──────── resume ────────┘
//	any state ──▶ killed (with a KillReason)
//
// The store is the source of truth. Every transition is one store update
// that checks the state it starts from and increments the lifecycle epoch
// on start, pause and resume; a timer or a node answer that belongs to an
// older epoch is dropped. Deadlines live in the store (end_at), so a
// restarted Manager re-arms them all in Run.
package lifecycle

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/sandbox"
	"github.com/warren-sandbox/warren/internal/store"
)

// Config configures a Manager. Store and Node are required.
type Config struct {
	Store  store.Store
	Node   nodeapi.Service
	NodeID string // recorded on each sandbox; default "local"
	// AllNodes says Node serves the sandboxes of every node (a placement
	// over many, which records each sandbox's node itself): no NodeID is
	// recorded and reconcile considers every sandbox.
	AllNodes bool
	Logger   *slog.Logger
	// PauseRetry is how often a refused auto-pause is retried (default
	// 10 s); PauseOverstay is how long after the first refusal the pause
	// degrades to filesystem-only (default 120 s). docs/lifecycle.md §3.
	PauseRetry    time.Duration
	PauseOverstay time.Duration
	// StartGrace, when positive, is how long Reconcile leaves a sandbox in
	// state starting to its creator, which may be another Manager sharing
	// the store (API replicas); after it, a start that never finished is
	// settled. Zero (one Manager per store) settles every start that is
	// not this Manager's own at once.
	StartGrace time.Duration
	// AutoResumeTimeout is the TTL given to a sandbox woken by traffic
	// (default 5 min).
	AutoResumeTimeout time.Duration
	// Registry receives sandbox_killed_total{kill_reason}; nil registers
	// nothing.
	Registry prometheus.Registerer
	// TeamLimits, when set, gives a team's limits for resumes (connect,
	// resume and auto-resume take a concurrency slot) and pauses (a bound
	// on paused sandboxes); nil bounds neither.
	TeamLimits func(ctx context.Context, teamID string) (TeamLimits, error)
	// SandboxChanges, when set, tells of every change of a sandbox's row,
	// made by this process or another on the same database
	// (store.SQL.WatchSandboxes); with it, Route serves running sandboxes'
	// routes from memory for RouteCacheTTL (default DefaultRouteCacheTTL;
	// negative: no cache).
	SandboxChanges func(ctx context.Context, fn func(id string)) error
	RouteCacheTTL  time.Duration
	// Snapshots, when set, takes sandbox snapshots (`warren serve`: the
	// in-process agent's, kept in its catalog); nil: Node's own, when it
	// has them (the placement of `warren api`, over each node's RPC).
	Snapshots nodeapi.SandboxSnapshotter
}

// Manager runs sandbox lifecycles. Create it with New and start its
// evictor and node watcher with Run.
type Manager struct {
	cfg   Config
	st    store.Store
	node  nodeapi.Service
	snaps nodeapi.SandboxSnapshotter // nil: no sandbox snapshots
	logs  nodeapi.LogSource          // nil: no kept logs
	log   *slog.Logger
	locks [64]sync.Mutex // striped per-sandbox locks
	// killing (under killMu, made on first use) holds the sandboxes whose
	// kill has begun, which Route no longer routes (killroute.go).
	killMu  sync.Mutex
	killing map[string]struct{}
	// createMu makes the concurrency-limit check and the insert atomic;
	// resuming (under createMu) counts each team's resumes in progress,
	// which hold a concurrency slot before the store shows them running.
	createMu sync.Mutex
	resuming map[string]int
	// starting holds the IDs a Create or Fork is starting: from before
	// their row is inserted until their start is recorded (reconcile.go).
	startMu  sync.Mutex
	starting map[string]struct{}
	// pending (under startMu) holds the creates of one store write whose
	// row is not stored yet; admitted (under createMu) counts them per
	// team (create.go).
	pending  map[string]*pendingCreate
	admitted map[string]int

	evMu      sync.Mutex
	deadlines map[string]deadline
	wake      chan struct{}
	wg        sync.WaitGroup

	killed *prometheus.CounterVec
	routes *routeCache // nil without Config.SandboxChanges
	signs  *signIndex  // used while Config.SandboxChanges is live
}

// New returns a Manager.
func New(cfg Config) (*Manager, error) {
	if cfg.Store == nil || cfg.Node == nil {
		return nil, fmt.Errorf("lifecycle: store and node are required: %w", errdefs.ErrInvalid)
	}
	if cfg.NodeID == "" && !cfg.AllNodes {
		cfg.NodeID = "local"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.PauseRetry <= 0 {
		cfg.PauseRetry = 10 * time.Second
	}
	if cfg.PauseOverstay <= 0 {
		cfg.PauseOverstay = 120 * time.Second
	}
	if cfg.AutoResumeTimeout <= 0 {
		cfg.AutoResumeTimeout = 5 * time.Minute
	}
	if cfg.RouteCacheTTL == 0 {
		cfg.RouteCacheTTL = DefaultRouteCacheTTL
	}
	m := &Manager{
		cfg: cfg, st: cfg.Store, node: cfg.Node, snaps: cfg.Snapshots, log: cfg.Logger,
		deadlines: map[string]deadline{}, wake: make(chan struct{}, 1), starting: map[string]struct{}{}, resuming: map[string]int{},
		pending: map[string]*pendingCreate{}, admitted: map[string]int{}, signs: newSignIndex(),
		killed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandbox_killed_total",
			Help: "Sandboxes killed, by kill reason.",
		}, []string{"kill_reason"}),
	}
	if cfg.SandboxChanges != nil && cfg.RouteCacheTTL > 0 {
		m.routes = newRouteCache(cfg.RouteCacheTTL)
	}
	if m.snaps == nil {
		m.snaps, _ = cfg.Node.(nodeapi.SandboxSnapshotter)
	}
	m.logs, _ = cfg.Node.(nodeapi.LogSource)
	if cfg.Registry != nil {
		if err := cfg.Registry.Register(m.killed); err != nil {
			return nil, fmt.Errorf("lifecycle metrics: %w", err)
		}
	}
	return m, nil
}

func (m *Manager) lock(id string) func() {
	h := fnv.New32a()
	h.Write([]byte(id))
	mu := &m.locks[h.Sum32()%uint32(len(m.locks))]
	mu.Lock()
	return mu.Unlock
}

// CreateParams describes a new sandbox.
type CreateParams struct {
	TeamID    string
	Template  nodeapi.Template
	Alias     string
	Timeout   time.Duration
	Resources sandbox.Resources
	Metadata  map[string]string
	EnvVars   map[string]string
	// Secure issues an envd access token.
	Secure bool
	// TrafficToken issues a traffic access token, required by the proxy for
	// the sandbox's other ports.
	TrafficToken    bool
	AutoPause       bool
	AutoPauseMemory bool
	AutoResume      bool
	AllowInternet   *bool
	Policy          sandbox.NetworkPolicy
	// Network and VolumeMounts are the API's documents, kept for display.
	Network      json.RawMessage
	VolumeMounts json.RawMessage
	// Volumes are mounted into the sandbox (the node's view of
	// VolumeMounts); a create with volumes takes no warm pool member.
	Volumes []nodeapi.VolumeMount
	// MaxConcurrent, when positive, limits the team's active sandboxes.
	MaxConcurrent int
}

// Get returns a live (not killed) sandbox of the team; teamID "" matches
// any team.
func (m *Manager) Get(ctx context.Context, teamID, id string) (*store.Sandbox, error) {
	sb, err := m.st.GetSandbox(ctx, id)
	if err != nil {
		return nil, err
	}
	if sb.State == sandbox.StateKilled || (teamID != "" && sb.TeamID != teamID) {
		return nil, errdefs.Publicf(errdefs.ErrNotFound, "sandbox %q", id)
	}
	return sb, nil
}

// newEvent returns the lifecycle event of type typ for sandbox sb as it is
// after the transition: its IDs, current execution and metadata.
func newEvent(sb *store.Sandbox, typ string) *store.Event {
	return &store.Event{
		SandboxID: sb.ID, TeamID: sb.TeamID, TemplateID: sb.TemplateID, BuildID: sb.Spec.BuildID,
		ExecutionID: sb.Spec.ExecutionID, Type: typ, Epoch: sb.Epoch, At: time.Now().UTC(),
		Data: store.EventData{Metadata: maps.Clone(sb.Spec.Metadata)},
	}
}

// execution describes sb's current incarnation, ending now.
func execution(sb *store.Sandbox, now time.Time) *store.Execution {
	return &store.Execution{
		StartedAt: sb.StartedAt, VCPUCount: sb.Spec.Resources.VCPUs, MemoryMB: sb.Spec.Resources.MemoryMB,
		ExecutionTime: max(now.Sub(sb.StartedAt).Milliseconds(), 0),
	}
}

// event records a lifecycle event outside a transition; a failure is
// logged, not returned.
func (m *Manager) event(ctx context.Context, e *store.Event) {
	if err := m.st.AppendEvent(context.WithoutCancel(ctx), e); err != nil {
		m.log.Warn("record event", "sandbox_id", e.SandboxID, "event", e.Type, "error", err)
	}
}

// Kill stops a sandbox for reason. An unknown or already killed sandbox is
// ErrNotFound.
func (m *Manager) Kill(ctx context.Context, teamID, id string, reason sandbox.KillReason) error {
	defer m.lock(id)()
	if m.killPending(teamID, id, "", reason) {
		// Its create carries the kill out when the node answers.
		m.log.Info("killing sandbox while it starts", "sandbox_id", id, "kill_reason", reason.String())
		return nil
	}
	if _, err := m.Get(ctx, teamID, id); err != nil {
		return err
	}
	return m.killLocked(ctx, id, "", reason)
}

// killLocked kills sandbox id; executionID, when set, names the execution
// the kill is for, and a node running another one refuses it (ErrConflict).
func (m *Manager) killLocked(ctx context.Context, id, executionID string, reason sandbox.KillReason) error {
	ctx = context.WithoutCancel(ctx)
	log := m.log.With("sandbox_id", id, "kill_reason", reason.String())
	if executionID != "" {
		log = log.With("execution_id", executionID)
	}
	log.Info("killing sandbox")
	defer m.unroutable(id)()
	var err error
	if ek, ok := m.node.(nodeapi.ExecutionKiller); ok && executionID != "" {
		err = ek.KillExecution(ctx, id, executionID, reason)
	} else {
		err = m.node.Kill(ctx, id, reason)
	}
	if err != nil && !errdefs.IsNotFound(err) {
		log.Warn("node kill failed", "error", err)
		return fmt.Errorf("kill sandbox %q: %w", id, err)
	}
	var sb *store.Sandbox
	if err != nil {
		// Gone from its node already: the node's own kill, when it
		// tells one, is what is recorded.
		var recorded sandbox.KillReason
		sb, recorded, err = m.nodeEnded(ctx, id, err, reason, executionID)
		if recorded != reason {
			log = log.With("kill_reason", recorded.String())
			log.Info("sandbox had been killed by its node on its own", "requested_kill_reason", reason.String())
		}
	} else {
		sb, err = m.markKilled(ctx, id, reason, executionID)
	}
	if errdefs.IsNotFound(err) {
		// Another replica may have recorded the end first (it heard the
		// node's exit event): the sandbox is killed all the same.
		if cur, gerr := m.st.GetSandbox(ctx, id); gerr == nil && cur.State == sandbox.StateKilled {
			m.disarm(id)
			log.Info("sandbox killed; its end was recorded by another replica", "team_id", cur.TeamID, "recorded_kill_reason", cur.KillReason.String())
			return nil
		}
	}
	if err != nil {
		return err
	}
	log.Info("sandbox killed", "team_id", sb.TeamID, "execution_id", sb.Spec.ExecutionID)
	return nil
}

// markKilled records the kill, now; executionID, when set, must match the
// sandbox's current execution (a stale node event is dropped).
func (m *Manager) markKilled(ctx context.Context, id string, reason sandbox.KillReason, executionID string) (*store.Sandbox, error) {
	return m.markKilledAt(ctx, id, reason, executionID, time.Time{})
}

// markKilledAt is markKilled for a kill made at (a node's own kill, which
// the control plane hears of later): the sandbox's killed time and its
// killed event are at, kept between the start of its execution and now
// (zero: now).
func (m *Manager) markKilledAt(ctx context.Context, id string, reason sandbox.KillReason, executionID string, at time.Time) (*store.Sandbox, error) {
	sb, err := m.st.TransitionSandbox(ctx, id, func(s *store.Sandbox) (*store.Event, error) {
		if s.State == sandbox.StateKilled {
			return nil, errdefs.Publicf(errdefs.ErrNotFound, "sandbox %q", id)
		}
		if executionID != "" && s.Spec.ExecutionID != executionID {
			return nil, fmt.Errorf("sandbox %q: stale execution %q: %w", id, executionID, errdefs.ErrConflict)
		}
		wasRunning := s.State == sandbox.StateRunning || s.State == sandbox.StatePausing
		now := time.Now().UTC()
		killedAt := at.UTC()
		switch {
		case at.IsZero() || killedAt.After(now):
			killedAt = now
		case killedAt.Before(s.StartedAt):
			killedAt = s.StartedAt.UTC()
		}
		s.State, s.KillReason, s.KilledAt = sandbox.StateKilled, reason, killedAt
		e := newEvent(s, store.EventKilled)
		e.At = killedAt
		e.Reason = reason
		if wasRunning {
			e.Data.Execution = execution(s, s.KilledAt)
		}
		return e, nil
	})
	if err != nil {
		return nil, err
	}
	m.disarm(id)
	m.killed.WithLabelValues(reason.String()).Inc()
	return sb, nil
}

// SetTimeout sets the sandbox's end time to now+d; it may shorten it.
func (m *Manager) SetTimeout(ctx context.Context, teamID, id string, d time.Duration) error {
	return m.setEnd(ctx, teamID, id, d, false)
}

// Extend moves the end time to now+d unless it is already later.
func (m *Manager) Extend(ctx context.Context, teamID, id string, d time.Duration) error {
	return m.setEnd(ctx, teamID, id, d, true)
}

func (m *Manager) setEnd(ctx context.Context, teamID, id string, d time.Duration, extendOnly bool) error {
	defer m.lock(id)()
	if _, err := m.Get(ctx, teamID, id); err != nil {
		return err
	}
	end := time.Now().UTC().Add(d)
	sb, err := m.st.TransitionSandbox(ctx, id, func(s *store.Sandbox) (*store.Event, error) {
		if s.State == sandbox.StateKilled {
			return nil, errdefs.Publicf(errdefs.ErrNotFound, "sandbox %q", id)
		}
		if extendOnly && s.EndAt.After(end) {
			end = s.EndAt
		}
		changed := !s.EndAt.Equal(end)
		s.EndAt = end
		if !changed {
			return nil, nil
		}
		e := newEvent(s, store.EventUpdated)
		e.Data.EndAt = &end
		return e, nil
	})
	if err != nil {
		return err
	}
	if sb.State == sandbox.StateRunning {
		if err := m.node.SetEndTime(ctx, id, sb.EndAt); err != nil && !errdefs.IsNotFound(err) {
			m.log.Warn("node set end time", "sandbox_id", id, "error", err)
		}
		m.arm(id, sb.Spec.ExecutionID, sb.EndAt)
	}
	return nil
}

// Pause pauses a running sandbox. A paused one is ErrConflict.
func (m *Manager) Pause(ctx context.Context, teamID, id string, memory bool) error {
	defer m.lock(id)()
	sb, err := m.Get(ctx, teamID, id)
	if err != nil {
		return err
	}
	if sb.State != sandbox.StateRunning {
		return errdefs.Publicf(errdefs.ErrConflict, "sandbox %q is %s", id, sb.State)
	}
	return m.pauseLocked(ctx, sb, memory)
}

// pauseLocked moves a running sandbox to paused through pausing. A node
// refusal puts it back to running and is returned.
func (m *Manager) pauseLocked(ctx context.Context, sb *store.Sandbox, memory bool) error {
	ctx = context.WithoutCancel(ctx)
	if memory {
		if caps, err := m.node.Capabilities(ctx); err == nil && !caps.MemoryCheckpoint {
			memory = false
		}
	}
	epoch := sb.Epoch
	// The paused-sandbox bound is checked and the sandbox marked pausing
	// (which counts) under createMu, so two pauses cannot both take the
	// last slot.
	m.createMu.Lock()
	err := m.checkPaused(ctx, sb)
	if err == nil {
		_, err = m.st.UpdateSandbox(ctx, sb.ID, func(s *store.Sandbox) error {
			if s.State != sandbox.StateRunning || s.Epoch != epoch {
				return errdefs.Publicf(errdefs.ErrConflict, "sandbox %q is %s", s.ID, s.State)
			}
			s.State = sandbox.StatePausing
			return nil
		})
	}
	m.createMu.Unlock()
	if err != nil {
		return err
	}
	ns, perr := m.node.Pause(ctx, sb.ID, nodeapi.PauseRequest{Memory: memory, ExecutionID: sb.Spec.ExecutionID})
	out, err := m.st.TransitionSandbox(ctx, sb.ID, func(s *store.Sandbox) (*store.Event, error) {
		if s.State != sandbox.StatePausing {
			return nil, errdefs.Publicf(errdefs.ErrConflict, "sandbox %q is %s", s.ID, s.State)
		}
		if perr != nil {
			s.State = sandbox.StateRunning
			return nil, nil
		}
		s.State, s.Epoch = sandbox.StatePaused, s.Epoch+1
		s.Spec.PausedWithMemory = ns.PausedWithMemory
		s.Spec.PauseRefusedAt = time.Time{}
		e := newEvent(s, store.EventPaused)
		e.Data.Execution = execution(s, time.Now())
		e.Data.PausedWithMemory = &ns.PausedWithMemory
		e.Message = fmt.Sprintf("memory=%t", ns.PausedWithMemory)
		return e, nil
	})
	if perr != nil {
		if errdefs.IsNotFound(perr) {
			if _, reason, err := m.nodeEnded(ctx, sb.ID, perr, sandbox.KillNodeLost, ""); err == nil {
				m.log.Warn("sandbox gone from its node at its pause", "sandbox_id", sb.ID, "kill_reason", reason.String())
			}
		}
		return fmt.Errorf("pause sandbox %q: %w", sb.ID, perr)
	}
	if err != nil {
		return err
	}
	m.disarm(sb.ID)
	m.log.Info("sandbox paused", "sandbox_id", sb.ID, "execution_id", out.Spec.ExecutionID, "memory", ns.PausedWithMemory)
	return nil
}

// Connect makes sure the sandbox runs and its end time is at least now+d.
// resumed tells whether it had to be resumed.
func (m *Manager) Connect(ctx context.Context, teamID, id string, d time.Duration) (sb *store.Sandbox, resumed bool, err error) {
	unlock := m.lock(id)
	sb, err = m.Get(ctx, teamID, id)
	if err != nil {
		unlock()
		return nil, false, err
	}
	if sb.State == sandbox.StatePaused {
		sb, err = m.resumeLocked(ctx, sb, d)
		unlock()
		return sb, err == nil, err
	}
	unlock()
	if sb.State != sandbox.StateRunning {
		return nil, false, errdefs.Publicf(errdefs.ErrConflict, "sandbox %q is %s", id, sb.State)
	}
	if err := m.Extend(ctx, teamID, id, d); err != nil {
		return nil, false, err
	}
	sb, err = m.Get(ctx, teamID, id)
	return sb, false, err
}

// Resume resumes a paused sandbox (the deprecated resume route); a running
// one is ErrConflict.
func (m *Manager) Resume(ctx context.Context, teamID, id string, d time.Duration, autoPause *bool) (*store.Sandbox, error) {
	defer m.lock(id)()
	sb, err := m.Get(ctx, teamID, id)
	if err != nil {
		return nil, err
	}
	if sb.State != sandbox.StatePaused {
		return nil, errdefs.Publicf(errdefs.ErrConflict, "sandbox %q is already %s", id, sb.State)
	}
	if autoPause != nil {
		sb.Spec.AutoPause = *autoPause
	}
	return m.resumeLocked(ctx, sb, d)
}

func (m *Manager) resumeLocked(ctx context.Context, sb *store.Sandbox, d time.Duration) (*store.Sandbox, error) {
	ctx = context.WithoutCancel(ctx)
	release, err := m.reserveResume(ctx, sb)
	if err != nil {
		return nil, err
	}
	defer release()
	end := time.Now().UTC().Add(d)
	exec := sandbox.NewExecutionID()
	autoPause := sb.Spec.AutoPause
	ns, err := m.node.Resume(ctx, sb.ID, nodeapi.ResumeRequest{ExecutionID: exec, EndAt: end})
	if err != nil {
		if errdefs.IsNotFound(err) {
			if _, reason, kerr := m.nodeEnded(ctx, sb.ID, err, sandbox.KillResumeFailed, ""); kerr == nil {
				m.log.Warn("sandbox could not be resumed", "sandbox_id", sb.ID, "kill_reason", reason.String(), "error", err)
			}
			return nil, errdefs.Publicf(errdefs.ErrNotFound, "resume sandbox %q", sb.ID)
		}
		return nil, fmt.Errorf("resume sandbox %q: %w", sb.ID, err)
	}
	out, err := m.st.TransitionSandbox(ctx, sb.ID, func(s *store.Sandbox) (*store.Event, error) {
		if s.State != sandbox.StatePaused {
			return nil, errdefs.Publicf(errdefs.ErrConflict, "sandbox %q is %s", s.ID, s.State)
		}
		s.State, s.Epoch, s.EndAt = sandbox.StateRunning, s.Epoch+1, end
		s.StartedAt = time.Now().UTC()
		s.Spec.ExecutionID, s.Spec.AutoPause = exec, autoPause
		if ns.EnvdVersion != "" {
			s.Spec.EnvdVersion = ns.EnvdVersion
		}
		return newEvent(s, store.EventResumed), nil
	})
	if err != nil {
		return nil, err
	}
	m.arm(sb.ID, exec, end)
	m.log.Info("sandbox resumed", "sandbox_id", sb.ID, "execution_id", exec, "end_at", end)
	return out, nil
}

// UpdateNetwork replaces a running sandbox's egress policy.
func (m *Manager) UpdateNetwork(ctx context.Context, teamID, id string, p sandbox.NetworkPolicy, doc json.RawMessage, allowInternet *bool) error {
	defer m.lock(id)()
	sb, err := m.Get(ctx, teamID, id)
	if err != nil {
		return err
	}
	if sb.State != sandbox.StateRunning {
		return errdefs.Publicf(errdefs.ErrConflict, "sandbox %q is %s", id, sb.State)
	}
	// An update that does not say keeps the sandbox's internet access as
	// it is (never turns it on).
	if allowInternet == nil {
		allowInternet = sb.Spec.AllowInternet
	}
	p.Internet = allowInternet == nil || *allowInternet
	if err := m.node.UpdateNetwork(ctx, id, p); err != nil {
		return fmt.Errorf("update network of sandbox %q: %w", id, err)
	}
	_, err = m.st.TransitionSandbox(ctx, id, func(s *store.Sandbox) (*store.Event, error) {
		s.Spec.Network, s.Spec.AllowInternet = doc, allowInternet
		e := newEvent(s, store.EventUpdated)
		e.Message = "network"
		return e, nil
	})
	return err
}

// Checkpointed records that a snapshot of a running sandbox was taken (a
// checkpointed event naming snapshotID); the sandbox keeps running.
func (m *Manager) Checkpointed(ctx context.Context, teamID, id, snapshotID string) error {
	defer m.lock(id)()
	sb, err := m.Get(ctx, teamID, id)
	if err != nil {
		return err
	}
	e := newEvent(sb, store.EventCheckpointed)
	e.Data.SnapshotID = snapshotID
	if err := m.st.AppendEvent(context.WithoutCancel(ctx), e); err != nil {
		return fmt.Errorf("sandbox %q: record checkpoint: %w", id, err)
	}
	m.log.Info("sandbox checkpointed", "sandbox_id", id, "execution_id", sb.Spec.ExecutionID, "snapshot_id", snapshotID)
	return nil
}

// ForkResult is the outcome of one fork.
type ForkResult struct {
	Sandbox *store.Sandbox
	Err     error
}

// Fork makes count copies of a running sandbox, each living for d. Each
// copy gets an envd access token and a traffic access token of its own
// where the source has one (copyTokens), so that one copy's tokens open
// neither its source nor its siblings.
func (m *Manager) Fork(ctx context.Context, teamID, id string, count int, d time.Duration, maxConcurrent int) ([]ForkResult, error) {
	src, err := m.Get(ctx, teamID, id)
	if err != nil {
		return nil, err
	}
	if src.State != sandbox.StateRunning {
		return nil, errdefs.Publicf(errdefs.ErrConflict, "sandbox %q is %s", id, src.State)
	}
	now := time.Now().UTC()
	results := make([]ForkResult, count)
	var ids, execs, tokens, all []string
	var idx []int
	defer func() { m.endStart(all...) }()
	for i := range count {
		c := *src
		c.ID, c.State, c.Epoch, c.StartedAt, c.EndAt, c.CreatedAt = sandbox.NewID(), sandbox.StateStarting, 1, now, now.Add(d), time.Time{}
		c.Spec.ExecutionID = sandbox.NewExecutionID()
		c.Spec.Metadata = maps.Clone(src.Spec.Metadata)
		copyTokens(&c.Spec)
		m.beginStart(c.ID)
		all = append(all, c.ID)
		if err := m.reserve(ctx, &c, maxConcurrent); err != nil {
			results[i].Err = err
			continue
		}
		ids, execs, tokens, idx = append(ids, c.ID), append(execs, c.Spec.ExecutionID), append(tokens, c.Spec.EnvdAccessToken), append(idx, i)
	}
	if len(ids) == 0 {
		return results, nil
	}
	forks, ferr := m.node.Fork(context.WithoutCancel(ctx), id, nodeapi.ForkRequest{IDs: ids, ExecutionIDs: execs, EndAt: now.Add(d), EnvdAccessTokens: tokens})
	got := map[string]*nodeapi.Sandbox{}
	var forked []string
	for _, f := range forks {
		got[f.ID] = f
	}
	for k, fid := range ids {
		i := idx[k]
		f, ok := got[fid]
		if !ok {
			m.st.DeleteSandbox(context.WithoutCancel(ctx), fid)
			results[i].Err = nodeFailure(ferr)
			if results[i].Err == nil {
				results[i].Err = errdefs.Publicf(errdefs.ErrUnavailable, "fork %q: the node did not start it", fid)
			}
			continue
		}
		sb, err := m.st.TransitionSandbox(context.WithoutCancel(ctx), fid, func(s *store.Sandbox) (*store.Event, error) {
			if s.State != sandbox.StateStarting {
				return nil, errdefs.Publicf(errdefs.ErrConflict, "sandbox %q is %s", s.ID, s.State)
			}
			s.State = sandbox.StateRunning
			if f.EnvdVersion != "" {
				s.Spec.EnvdVersion = f.EnvdVersion
			}
			e := newEvent(s, store.EventCreated)
			e.Data.SourceSandboxID, e.Message = id, "fork of "+id
			return e, nil
		})
		if err != nil {
			// Killed while starting: stop it, as Create does.
			m.node.Kill(context.WithoutCancel(ctx), fid, sandbox.KillRequest)
			results[i].Err = err
			continue
		}
		m.arm(fid, sb.Spec.ExecutionID, sb.EndAt)
		results[i].Sandbox = sb
		forked = append(forked, fid)
	}
	if len(forked) > 0 {
		e := newEvent(src, store.EventForked)
		e.Data.ForkIDs = forked
		m.event(ctx, e)
	}
	if len(forks) == 0 && ferr != nil && (errdefs.IsUnsupported(ferr) || errdefs.IsNotFound(ferr) || errdefs.IsConflict(ferr)) {
		return nil, fmt.Errorf("fork sandbox %q: %w", id, ferr)
	}
	return results, nil
}

// copyTokens gives the spec of a fork's copy, made from its source's,
// new access tokens where the source has them: a copy is secured as its
// source is, with credentials of its own.
func copyTokens(sp *store.Spec) {
	if sp.EnvdAccessToken != "" {
		sp.EnvdAccessToken = sandbox.RandomToken(32)
	}
	if sp.TrafficAccessToken != "" {
		sp.TrafficAccessToken = sandbox.RandomToken(32)
	}
}

// Stats returns a running sandbox's resource usage.
func (m *Manager) Stats(ctx context.Context, teamID, id string) (*nodeapi.Stats, error) {
	sb, err := m.Get(ctx, teamID, id)
	if err != nil {
		return nil, err
	}
	if sb.State != sandbox.StateRunning {
		return nil, nil
	}
	return m.node.Stats(ctx, id)
}
