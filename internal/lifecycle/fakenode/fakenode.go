// Package fakenode is a hand-written, in-memory nodeapi.Service for
// control-plane tests: sandboxes are map entries, every call is recorded,
// and errors and events can be injected.
package fakenode

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/warren-sandbox/warren/internal/envdproto"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/sandbox"
)

// Node is the fake. The zero value is not usable; call New.
type Node struct {
	mu        sync.Mutex
	sandboxes map[string]*nodeapi.Sandbox
	// kills are the fake's own kills not acknowledged yet
	// (nodeapi.KillReporter), by sandbox ID.
	kills    map[string]nodeapi.Event
	calls    []string
	watchers []chan nodeapi.Event

	// Address and Host are given to every sandbox (e.g. an httptest
	// server standing in for envd). Defaults: 127.0.0.1:49983, 127.0.0.1.
	Address string
	Host    string
	// CreateErr, PauseErr, ResumeErr, when set, are returned by the
	// matching call (PauseErr is consulted on every call, so a test can
	// refuse the first pauses and accept later ones).
	CreateErr error
	PauseErr  func(id string) error
	ResumeErr error
	// Caps is returned by Capabilities.
	Caps nodeapi.Capabilities
	// IgnoreTimeout makes Create keep the request's EndAt whatever its
	// Timeout, as a node that does not know the field does.
	IgnoreTimeout bool
	// BeforeCreate and BeforeFork, when set, run at the start of Create
	// and Fork; BeforeList and AfterList before List takes its listing and
	// after, just before it returns it. They run outside the fake's lock,
	// so race tests use them to make other calls at that point. Set them
	// before the calls they watch.
	BeforeCreate func(req nodeapi.CreateRequest)
	BeforeFork   func(id string, req nodeapi.ForkRequest)
	BeforeList   func()
	AfterList    func(listed []*nodeapi.Sandbox)
	// Logs, when set, is the kept log SandboxLogs answers for a running
	// sandbox (before start's filter); nil: one line of its start.
	Logs func(id string) []nodeapi.LogEntry
}

var (
	_ nodeapi.Service   = (*Node)(nil)
	_ nodeapi.LogSource = (*Node)(nil)
)

// New returns an empty fake node.
func New() *Node {
	return &Node{
		sandboxes: map[string]*nodeapi.Sandbox{},
		kills:     map[string]nodeapi.Event{},
		Address:   "127.0.0.1:49983",
		Host:      "127.0.0.1",
		Caps:      nodeapi.Capabilities{Driver: "fakenode", MemoryCheckpoint: true, Freeze: true, Fork: true},
	}
}

func (n *Node) record(format string, args ...any) {
	n.calls = append(n.calls, fmt.Sprintf(format, args...))
}

// Calls returns the calls made so far, e.g. "kill abc timeout".
func (n *Node) Calls() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.calls)
}

func clone(s *nodeapi.Sandbox) *nodeapi.Sandbox {
	c := *s
	c.Metadata = maps.Clone(s.Metadata)
	return &c
}

// Create implements nodeapi.Service.
func (n *Node) Create(_ context.Context, req nodeapi.CreateRequest) (*nodeapi.Sandbox, error) {
	if n.BeforeCreate != nil {
		n.BeforeCreate(req)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.record("create %s", req.ID)
	if n.CreateErr != nil {
		return nil, n.CreateErr
	}
	if _, ok := n.sandboxes[req.ID]; ok {
		return nil, fmt.Errorf("sandbox %q: %w", req.ID, errdefs.ErrAlreadyExists)
	}
	now := time.Now()
	end := req.EndAt
	if req.Timeout > 0 && !n.IgnoreTimeout {
		end = now.Add(req.Timeout)
	}
	s := &nodeapi.Sandbox{
		ID: req.ID, ExecutionID: req.ExecutionID, TemplateID: req.Template.ID, BuildID: req.Template.BuildID,
		TeamID: req.TeamID, State: sandbox.StateRunning, Epoch: 1, StartedAt: now, EndAt: end,
		Resources: req.Resources, Network: req.Network, Address: n.Address, Host: n.Host,
		EnvdVersion: envdproto.Version, Metadata: maps.Clone(req.Metadata), Health: nodeapi.HealthUnknown,
	}
	n.sandboxes[req.ID] = s
	return clone(s), nil
}

func (n *Node) get(id string) (*nodeapi.Sandbox, error) {
	s, ok := n.sandboxes[id]
	if !ok {
		if ev, ok := n.kills[id]; ok {
			return nil, &nodeapi.KilledError{Kill: ev}
		}
		return nil, fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
	}
	return s, nil
}

// Get implements nodeapi.Service.
func (n *Node) Get(_ context.Context, id string) (*nodeapi.Sandbox, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	s, err := n.get(id)
	if err != nil {
		return nil, err
	}
	return clone(s), nil
}

// List implements nodeapi.Service.
func (n *Node) List(context.Context) ([]*nodeapi.Sandbox, error) {
	if n.BeforeList != nil {
		n.BeforeList()
	}
	n.mu.Lock()
	var out []*nodeapi.Sandbox
	for _, s := range n.sandboxes {
		out = append(out, clone(s))
	}
	n.mu.Unlock()
	if n.AfterList != nil {
		n.AfterList(out)
	}
	return out, nil
}

// SetEndTime implements nodeapi.Service.
func (n *Node) SetEndTime(_ context.Context, id string, endAt time.Time) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.record("setendtime %s", id)
	s, err := n.get(id)
	if err != nil {
		return err
	}
	s.EndAt = endAt
	return nil
}

// UpdateNetwork implements nodeapi.Service.
func (n *Node) UpdateNetwork(_ context.Context, id string, p sandbox.NetworkPolicy) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.record("network %s", id)
	s, err := n.get(id)
	if err != nil {
		return err
	}
	s.Network = p
	return nil
}

// Pause implements nodeapi.Service.
func (n *Node) Pause(_ context.Context, id string, req nodeapi.PauseRequest) (*nodeapi.Sandbox, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.record("pause %s memory=%t", id, req.Memory)
	s, err := n.get(id)
	if err != nil {
		return nil, err
	}
	if n.PauseErr != nil {
		if err := n.PauseErr(id); err != nil {
			return nil, err
		}
	}
	if s.State != sandbox.StateRunning {
		return nil, fmt.Errorf("sandbox %q is %s: %w", id, s.State, errdefs.ErrConflict)
	}
	if req.ExecutionID != "" && req.ExecutionID != s.ExecutionID {
		return nil, fmt.Errorf("sandbox %q: stale execution %q: %w", id, req.ExecutionID, errdefs.ErrConflict)
	}
	s.State, s.Epoch, s.PausedWithMemory = sandbox.StatePaused, s.Epoch+1, req.Memory
	return clone(s), nil
}

// Resume implements nodeapi.Service.
func (n *Node) Resume(_ context.Context, id string, req nodeapi.ResumeRequest) (*nodeapi.Sandbox, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.record("resume %s", id)
	s, err := n.get(id)
	if err != nil {
		return nil, err
	}
	if n.ResumeErr != nil {
		return nil, n.ResumeErr
	}
	if s.State != sandbox.StatePaused {
		return nil, fmt.Errorf("sandbox %q is %s: %w", id, s.State, errdefs.ErrConflict)
	}
	s.State, s.Epoch, s.ExecutionID, s.EndAt = sandbox.StateRunning, s.Epoch+1, req.ExecutionID, req.EndAt
	return clone(s), nil
}

// Fork implements nodeapi.Service.
func (n *Node) Fork(_ context.Context, id string, req nodeapi.ForkRequest) ([]*nodeapi.Sandbox, error) {
	if n.BeforeFork != nil {
		n.BeforeFork(id, req)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.record("fork %s %d", id, len(req.IDs))
	if !n.Caps.Fork {
		return nil, fmt.Errorf("fork sandbox %q: %w", id, errdefs.ErrUnsupported)
	}
	s, err := n.get(id)
	if err != nil {
		return nil, err
	}
	if s.State != sandbox.StateRunning {
		return nil, fmt.Errorf("sandbox %q is %s: %w", id, s.State, errdefs.ErrConflict)
	}
	var out []*nodeapi.Sandbox
	for i, nid := range req.IDs {
		c := clone(s)
		c.ID, c.Epoch, c.StartedAt, c.EndAt = nid, 1, time.Now(), req.EndAt
		if i < len(req.ExecutionIDs) {
			c.ExecutionID = req.ExecutionIDs[i]
		}
		n.sandboxes[nid] = c
		out = append(out, clone(c))
	}
	return out, nil
}

// Kill implements nodeapi.Service.
func (n *Node) Kill(_ context.Context, id string, reason sandbox.KillReason) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.record("kill %s %s", id, reason)
	if _, err := n.get(id); err != nil {
		return err
	}
	delete(n.sandboxes, id)
	return nil
}

var _ nodeapi.ExecutionKiller = (*Node)(nil)

// KillExecution implements nodeapi.ExecutionKiller; it records the call as
// Kill does.
func (n *Node) KillExecution(_ context.Context, id, executionID string, reason sandbox.KillReason) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.record("kill %s %s", id, reason)
	s, err := n.get(id)
	if err != nil {
		return err
	}
	if executionID != "" && s.ExecutionID != executionID {
		return fmt.Errorf("sandbox %q: stale execution %q: %w", id, executionID, errdefs.ErrConflict)
	}
	delete(n.sandboxes, id)
	return nil
}

// Stats implements nodeapi.Service.
func (n *Node) Stats(_ context.Context, id string) (*nodeapi.Stats, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	s, err := n.get(id)
	if err != nil {
		return nil, err
	}
	return &nodeapi.Stats{At: time.Now(), CPUCount: s.Resources.VCPUs, CPUUsedPct: 1.5,
		MemoryUsedBytes: 64 << 20, MemoryTotal: uint64(s.Resources.MemoryMB) << 20,
		DiskUsedBytes: 1 << 20, DiskTotalBytes: 1 << 30}, nil
}

// SandboxLogs implements nodeapi.LogSource.
func (n *Node) SandboxLogs(_ context.Context, id string, start time.Time) ([]nodeapi.LogEntry, error) {
	n.mu.Lock()
	n.record("logs %s", id)
	s, err := n.get(id)
	var state sandbox.State
	var started time.Time
	if err == nil {
		state, started = s.State, s.StartedAt
	}
	logs := n.Logs
	n.mu.Unlock()
	switch {
	case err != nil:
		return nil, err
	case state != sandbox.StateRunning:
		return nil, fmt.Errorf("sandbox %q is %s: %w", id, state, errdefs.ErrConflict)
	}
	var all []nodeapi.LogEntry
	if logs != nil {
		all = logs(id)
	} else {
		all = []nodeapi.LogEntry{{Timestamp: started, Level: "info", Message: "sandbox started", Fields: map[string]string{"logger": "fakenode"}}}
	}
	out := make([]nodeapi.LogEntry, 0, len(all))
	for _, e := range all {
		if !e.Timestamp.Before(start) {
			out = append(out, e)
		}
	}
	return out, nil
}

// Watch implements nodeapi.Service.
func (n *Node) Watch(ctx context.Context) (<-chan nodeapi.Event, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	ch := make(chan nodeapi.Event, 16)
	n.watchers = append(n.watchers, ch)
	go func() {
		<-ctx.Done()
		n.mu.Lock()
		defer n.mu.Unlock()
		n.watchers = slices.DeleteFunc(n.watchers, func(c chan nodeapi.Event) bool { return c == ch })
		close(ch)
	}()
	return ch, nil
}

// Exit makes a sandbox end by itself (as if its init exited), keeps it as
// the node's own kill and tells the watchers.
func (n *Node) Exit(id string, reason sandbox.KillReason) {
	n.mu.Lock()
	defer n.mu.Unlock()
	s, ok := n.sandboxes[id]
	if !ok {
		return
	}
	delete(n.sandboxes, id)
	ev := nodeapi.Event{Type: nodeapi.EventExited, SandboxID: id, ExecutionID: s.ExecutionID, Reason: reason, At: time.Now()}
	n.kills[id] = ev
	for _, w := range n.watchers {
		w <- ev
	}
}

// KillOwn makes the node kill a sandbox on its own (its backstop, say)
// at, keeping the kill, and tells no watcher: as while the control plane
// is away.
func (n *Node) KillOwn(id string, reason sandbox.KillReason, at time.Time) {
	n.mu.Lock()
	defer n.mu.Unlock()
	s, ok := n.sandboxes[id]
	if !ok {
		return
	}
	delete(n.sandboxes, id)
	n.kills[id] = nodeapi.Event{Type: nodeapi.EventKilled, SandboxID: id, ExecutionID: s.ExecutionID, Reason: reason, At: at}
}

var _ nodeapi.KillReporter = (*Node)(nil)

// OwnKills implements nodeapi.KillReporter.
func (n *Node) OwnKills(context.Context) ([]nodeapi.Event, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := slices.Collect(maps.Values(n.kills))
	slices.SortFunc(out, func(a, b nodeapi.Event) int { return a.At.Compare(b.At) })
	return out, nil
}

// AckKills implements nodeapi.KillReporter.
func (n *Node) AckKills(_ context.Context, acks []nodeapi.KillAck) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.record("ackkills %d", len(acks))
	for _, k := range acks {
		if ev, ok := n.kills[k.SandboxID]; ok && ev.ExecutionID == k.ExecutionID {
			delete(n.kills, k.SandboxID)
		}
	}
	return nil
}

// Put adds a sandbox directly (e.g. one the control plane does not know).
func (n *Node) Put(s *nodeapi.Sandbox) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.sandboxes[s.ID] = clone(s)
}

// Capabilities implements nodeapi.Service.
func (n *Node) Capabilities(context.Context) (nodeapi.Capabilities, error) { return n.Caps, nil }

// Emit sends ev to the watchers as it is, without changing any sandbox (a
// late event of an older execution, say).
func (n *Node) Emit(ev nodeapi.Event) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, w := range n.watchers {
		w <- ev
	}
}

// SetHealth sets the watchdog health that Get reports for sandbox id.
func (n *Node) SetHealth(id string, h nodeapi.Health) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if s, ok := n.sandboxes[id]; ok {
		s.Health = h
	}
}
