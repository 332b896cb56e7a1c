package node

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/warren-sandbox/warren/internal/cgroup"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/netslot"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/sandbox"
)

// handle is one sandbox of the agent (after nomad's task handle): it owns
// the sandbox's state and the locks over it, and the operations on one
// sandbox are its methods: create's bring-up (lifecycle.go), pause and
// resume (pause.go), a fork of it (fork.go), the keep and
// preparation of its host objects (keep.go), kill, exit and backstop
// (kill.go), snapshots (snapshot.go, snapshot_sandbox.go), a pool member's
// claim (pool.go), probes and samples (watchdog.go, samples.go).
//
// It reaches what is node-wide (driver, host pieces, configuration, clock,
// events, the keep set, the reclaim) through its agent a, and never takes
// one of the agent's locks while it holds its own mu (node.go has the
// order).
type handle struct {
	a  *Agent
	id string // the sandbox's ID; never changes

	// op serialises the operations that change the sandbox's host
	// objects: create, pause, resume, the checkpoint of a fork or a
	// snapshot, a claim, the eviction of kept objects, kill and exit
	// handling. Each taker releases it with defer and, once it holds it,
	// waits for a preparation in flight (awaitPrepare, keep.go).
	op sync.Mutex
	// files orders the writes of the sandbox's directory (its state
	// record, its metrics) and its removal.
	files sync.Mutex

	// mu guards the fields below. It is held only to read or change them,
	// in a method of the handle that releases it with defer, and never
	// across a call to the driver, a host piece, envd or the disk.
	mu sync.Mutex
	// rec is the sandbox's record: identity, lifecycle state, epoch,
	// execution, end time and host objects, as persisted.
	rec           record
	cg            cgroup.Cgroup
	backstop      Timer
	backstopAt    time.Time
	backstopFloor time.Time // a refused pause pushed the backstop to at least this
	stopWatch     context.CancelFunc
	// checkpointing is set, before op is taken, while the sandbox's
	// memory is checkpointed (pause with memory, fork, snapshot), so that
	// a second checkpoint is refused at once instead of queueing on op.
	checkpointing bool
	kept          *keptObjects // host objects kept while paused (keep.go)
	// preparing is closed when the preparation of the kept objects in
	// flight ends (keep.go); nil when none is.
	preparing chan struct{}
	gone      bool // killed or exited; out of the agent's map
	internal  bool // the agent's own (pool member, template snapshot): not listed, no events
	lastCPU   uint64
	lastCPUAt time.Time
	watch     watchState
	samples   sampleRing
}

func (a *Agent) newHandle(r record, internal bool) *handle {
	return &handle{a: a, id: r.ID, rec: r, internal: internal}
}

// sbxState is a handle's state as read at one moment.
type sbxState struct {
	rec           record
	cg            cgroup.Cgroup
	gone          bool
	internal      bool
	checkpointing bool
}

// get returns h's state.
func (h *handle) get() sbxState {
	h.mu.Lock()
	defer h.mu.Unlock()
	return sbxState{rec: h.rec, cg: h.cg, gone: h.gone, internal: h.internal, checkpointing: h.checkpointing}
}

// view returns h as the node contract shows it.
func (h *handle) view() *nodeapi.Sandbox {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.viewLocked()
}

// listed is h's view for List: not while starting, nor for the agent's
// own sandboxes.
func (h *handle) listed() (*nodeapi.Sandbox, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.gone || h.internal || h.rec.State == sandbox.StateStarting {
		return nil, false
	}
	return h.viewLocked(), true
}

func (h *handle) viewLocked() *nodeapi.Sandbox {
	r := &h.rec
	v := &nodeapi.Sandbox{
		ID:               r.ID,
		ExecutionID:      r.ExecutionID,
		TemplateID:       r.Template.ID,
		BuildID:          r.Template.BuildID,
		TeamID:           r.TeamID,
		State:            r.State,
		Epoch:            r.Epoch,
		StartedAt:        r.StartedAt,
		EndAt:            r.EndAt,
		Resources:        r.Resources,
		Network:          r.Network.View(), // no header value or proxy password leaves the node
		EnvdVersion:      r.EnvdVersion,
		Metadata:         maps.Clone(r.Metadata),
		PausedWithMemory: r.PausedWithMemory,
		Health:           h.healthLocked(),
	}
	if r.State == sandbox.StateRunning && r.Slot != nil {
		v.Host = r.Slot.GuestIP.String()
		v.Address = h.a.envdAddr(r.Slot)
	}
	return v
}

// template is the template h runs, for TemplatesInUse.
func (h *handle) template() nodeapi.Template {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.rec.Template
}

// isGone reports whether h was killed or exited.
func (h *handle) isGone() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.gone
}

// markGone ends h: it is gone, its timers stopped and its keep ended (the
// caller, Agent.forget, takes it out of the map at the same time).
func (h *handle) markGone() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.gone = true
	h.stopTimersLocked()
	h.dropKeptLocked()
}

// stopTimers stops h's backstop and exit watcher (Close).
func (h *handle) stopTimers() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.stopTimersLocked()
}

func (h *handle) stopTimersLocked() {
	if h.backstop != nil {
		h.backstop.Stop()
		h.backstop = nil
	}
	if h.stopWatch != nil {
		h.stopWatch()
		h.stopWatch = nil
	}
}

// persist writes h's record as it is now; nothing once h is gone.
func (h *handle) persist() error {
	h.files.Lock()
	defer h.files.Unlock()
	st := h.get()
	if st.gone {
		return nil
	}
	return writeRecord(sandboxDir(h.a.cfg.DataDir, h.id), &st.rec)
}

// persistRecord writes r as h's record before h.rec takes it (a claim
// writes beside its /init); the caller holds op, so no other change of
// h.rec is written in between.
func (h *handle) persistRecord(r record) error {
	h.files.Lock()
	defer h.files.Unlock()
	if h.isGone() {
		return nil
	}
	return writeRecord(sandboxDir(h.a.cfg.DataDir, h.id), &r)
}

// removeDir removes h's directory, ordered with the writes into it.
func (h *handle) removeDir() error {
	h.files.Lock()
	defer h.files.Unlock()
	return removeDir(sandboxDir(h.a.cfg.DataDir, h.id))
}

// setEndTime sets h's end time and re-arms its backstop.
func (h *handle) setEndTime(endAt time.Time) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.gone {
		return h.a.goneErr(h.id)
	}
	h.rec.EndAt = endAt
	if h.rec.State == sandbox.StateRunning {
		h.armBackstopLocked()
	}
	return nil
}

// updateNetwork applies policy to h's slot, when it holds one, and
// records it for the next start.
func (h *handle) updateNetwork(ctx context.Context, policy netslot.Policy) error {
	h.op.Lock()
	defer h.op.Unlock()
	h.awaitPrepare()
	st := h.get()
	if st.gone {
		return h.a.goneErr(h.id)
	}
	// A paused sandbox that keeps its slot (keep.go) holds it already.
	if slot := st.rec.Slot; slot != nil && (st.rec.State == sandbox.StateRunning || st.rec.State == sandbox.StatePaused) {
		if err := h.a.cfg.Net.Update(ctx, slot, policy); err != nil {
			return fmt.Errorf("sandbox %q: update network: %w", h.id, err)
		}
		if st.rec.State == sandbox.StateRunning {
			if err := h.trustEgressCA(ctx, st.rec.AccessToken, slot, policy); err != nil {
				return fmt.Errorf("sandbox %q: update network: %w", h.id, err)
			}
		}
	}
	// Any other paused sandbox takes the policy when it resumes.
	h.setNetwork(policy)
	return h.persist()
}

func (h *handle) setNetwork(policy netslot.Policy) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.rec.Network = clonePolicy(policy)
}

// stats reads h's use now; the CPU share is over the time since the last
// call.
func (h *handle) stats(ctx context.Context) (*nodeapi.Stats, error) {
	a := h.a
	st := h.get()
	res := st.rec.Resources
	if st.rec.State != sandbox.StateRunning || st.cg == nil {
		return nil, fmt.Errorf("sandbox %q is %s: %w", h.id, st.rec.State, errdefs.ErrConflict)
	}
	cs, err := st.cg.Stats(ctx)
	if err != nil {
		return nil, fmt.Errorf("sandbox %q: stats: %w", h.id, err)
	}
	now := a.clock.Now()
	out := &nodeapi.Stats{
		At:              now,
		CPUCount:        res.VCPUs,
		MemoryUsedBytes: cs.MemoryBytes,
		MemoryPeakBytes: cs.MemoryPeakBytes,
		MemoryTotal:     memoryTotal(res, cs),
	}
	if used, total, err := a.cfg.Layers.Usage(ctx, h.id); err == nil {
		out.DiskUsedBytes, out.DiskTotalBytes = used, total
	} else {
		a.log.Debug("layer usage", "sandbox_id", h.id, "error", err)
	}
	out.CPUUsedPct = h.cpuSince(cs.CPUUsageNanos, now, res.VCPUs)
	return out, nil
}

// cpuSince is the CPU share h used since the last reading, which cpu
// (its cumulative use at now) becomes.
func (h *handle) cpuSince(cpu uint64, now time.Time, vcpus int) float64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	var pct float64
	if !h.lastCPUAt.IsZero() && now.After(h.lastCPUAt) && cpu >= h.lastCPU && vcpus > 0 {
		pct = 100 * float64(cpu-h.lastCPU) / float64(now.Sub(h.lastCPUAt).Nanoseconds()) / float64(vcpus)
	}
	h.lastCPU, h.lastCPUAt = cpu, now
	return pct
}

// backstopDeadline is when h's backstop fires (zero: not armed).
func (h *handle) backstopDeadline() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.backstopAt
}

// setCheckpointing marks h's checkpoint in flight, or over.
func (h *handle) setCheckpointing(v bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.checkpointing = v
}

// setHostObjects records the host objects bringUp made (or kept ones it
// used) for h.
func (h *handle) setHostObjects(slot *netslot.Slot, cgName, root string, cg cgroup.Cgroup) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.rec.Slot, h.rec.Cgroup, h.rec.RootFS, h.cg = slot, cgName, root, cg
	h.lastCPU, h.lastCPUAt = 0, h.a.clock.Now()
}

// clearHostObjects forgets the slot, cgroup and root of h (released).
func (h *handle) clearHostObjects() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.rec.Slot, h.rec.Cgroup, h.rec.RootFS, h.cg = nil, "", "", nil
}

// markStarted moves h, whose create brought it up, to running in its
// first epoch, ending at endAt(req, now), and returns its view.
func (h *handle) markStarted(req nodeapi.CreateRequest) *nodeapi.Sandbox {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.rec.State = sandbox.StateRunning
	h.rec.Epoch++
	h.rec.StartedAt = h.a.clock.Now()
	h.rec.EndAt = endAt(req, h.rec.StartedAt)
	h.armBackstopLocked()
	return h.viewLocked()
}

// markResumed moves h to running in a new epoch and returns its view.
func (h *handle) markResumed() *nodeapi.Sandbox {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.rec.State = sandbox.StateRunning
	h.rec.Epoch++
	h.rec.StartedAt = h.a.clock.Now()
	h.rec.PausedWithMemory = false
	h.armBackstopLocked()
	return h.viewLocked()
}

// markAdopted arms the backstop of h, a running sandbox a new agent took
// back.
func (h *handle) markAdopted() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lastCPUAt = h.a.clock.Now()
	h.armBackstopLocked()
}

// watchExit starts the goroutine that waits for the init of h's current
// epoch to exit (every start of an epoch of a running sandbox calls it:
// create, resume, fork, adopt, a failed pause, a claim); the previous
// epoch's watcher stops.
func (h *handle) watchExit() {
	ctx, epoch, ok := h.newWatch()
	if !ok {
		return
	}
	h.a.goTracked(func() { h.awaitExit(ctx, epoch) })
}

func (h *handle) newWatch() (context.Context, int64, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopWatch != nil {
		h.stopWatch()
		h.stopWatch = nil
	}
	if h.gone {
		return nil, 0, false
	}
	ctx, cancel := context.WithCancel(h.a.ctx)
	h.stopWatch = cancel
	return ctx, h.rec.Epoch, true
}

// runningIn returns h's state when it still runs in epoch.
func (h *handle) runningIn(epoch int64) (sbxState, bool) {
	st := h.get()
	return st, !st.gone && st.rec.Epoch == epoch && st.rec.State == sandbox.StateRunning
}
