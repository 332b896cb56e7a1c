package node

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warren-sandbox/warren/internal/driver"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/netslot"
	"github.com/warren-sandbox/warren/internal/nodeapi"
)

// Agent is the node agent. It implements Service, and the builder's
// Snapshotter (Snapshot).
//
// On disk, under Config.DataDir:
//
//	sandboxes/sbx-<id>/state.json   the versioned state record (mode 0600)
//	sandboxes/sbx-<id>/bundle/      the driver's files (OCI bundle)
//	sandboxes/sbx-<id>/snapshot/    the memory image while paused with memory
//	sandboxes/sbx-<id>/metrics.json the sampled metrics (samples.go)
//	forks/sbx-<id>-<random>/        a fork's image while its copies restore
//
// The writable layers live where Config.Layers keeps them.
//
// At New, a record in state running (or pausing) whose runtime container
// still runs is adopted: its slot and cgroup are taken back, its backstop
// re-armed and its exit watched again (a pausing one is running again, in
// a new epoch). A paused record is kept; one that kept its slot, cgroup
// and mount (keep.go) gives them up to the reclaim. Every other record (starting,
// killed, unreadable, or running without a container) is dropped, and the
// host objects of no kept sandbox are reclaimed and counted by kind:
// container, cgroup, network, mount, layer, state_dir (and fork_image for
// the images of unfinished forks). The same reclaim
// runs every Config.ReclaimInterval, keeping every sandbox the agent knows.
// A record written by a newer agent is left alone with all its objects.
//
// The agent holds a map of sandbox handles (handle.go), each owning its
// sandbox's state and lock, and what is node-wide: the warm pools
// (pool.go), the leak reclaim, the event watchers and the kill journal.
type Agent struct {
	cfg   Config
	log   *slog.Logger
	clock Clock
	// envdSum is the sha256 of Config.EnvdPath, for SnapshotHost.
	envdSum struct {
		once sync.Once
		v    string
		err  error
	}
	drv   driver.Driver
	spawn *spawner

	// reclaimMu is held for reading while host objects of a sandbox are
	// made (create, resume, fork) and for writing by the periodic reclaim,
	// so that a reclaim never sees objects of a sandbox not yet known.
	reclaimMu sync.RWMutex
	reclaimed reclaimCounts

	// mu guards the map of handles and the two flags that gate what joins
	// it or keeps host objects.
	mu        sync.Mutex
	sandboxes map[string]*handle
	closed    bool
	// draining: the control plane drains the node (keep.go's SetDraining).
	draining bool

	pools  warmPools
	events events
	// kills are the agent's own kills not acknowledged yet (kills.go).
	kills *killJournal

	killed         *prometheus.CounterVec
	reclaimCounter *prometheus.CounterVec
	wd             watchdogMetrics
	opDur          *prometheus.HistogramVec
	phaseDur       *prometheus.HistogramVec

	ctx    context.Context // ends at Close
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

var _ nodeapi.Service = (*Agent)(nil)

// New starts an agent on cfg.DataDir: it recovers the sandboxes an earlier
// agent left (adopting running ones, keeping paused ones) and reclaims the
// host objects that belong to no known sandbox.
func New(ctx context.Context, cfg Config) (*Agent, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(sandboxesDir(cfg.DataDir), 0o700); err != nil {
		return nil, fmt.Errorf("node data dir %s: %w", cfg.DataDir, err)
	}
	a := &Agent{
		cfg:       cfg,
		log:       cfg.Logger,
		clock:     cfg.Clock,
		drv:       cfg.Driver,
		sandboxes: map[string]*handle{},
		reclaimed: reclaimCounts{n: map[string]int{}},
		pools:     warmPools{byTmpl: map[string]*pool{}, reserved: map[string]*handle{}},
		events:    events{subs: map[chan nodeapi.Event]struct{}{}, log: cfg.Logger},
		reclaimCounter: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandbox_leaked_objects_reclaimed_total",
			Help: "Host objects (cgroups, network namespaces, mounts, loop devices, runtime containers, state directories) found belonging to no sandbox and destroyed.",
		}, []string{"kind"}),
	}
	kills, err := loadKillJournal(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	a.kills, a.killed = kills, newKilledCounter()
	a.initWatchdogMetrics()
	a.opDur = newOpDurations()
	a.phaseDur = newPhaseDurations()
	a.pools.pm = newPoolMetrics()
	for _, k := range []string{"container", "cgroup", "network", "mount", "loop_device", "layer", "state_dir", "fork_image"} {
		a.reclaimCounter.WithLabelValues(k)
	}
	if cfg.Registry != nil {
		for _, c := range append([]prometheus.Collector{a.reclaimCounter, a.opDur, &capacityCollector{a: a}, a.pools.pm.claims, a.pools.pm.ready, a.phaseDur}, a.watchdogCollectors()...) {
			if err := cfg.Registry.Register(c); err != nil {
				return nil, fmt.Errorf("node metrics: %w", err)
			}
		}
		if cfg.CountKills {
			if err := cfg.Registry.Register(a.killed); err != nil {
				return nil, fmt.Errorf("node metrics: %w", err)
			}
		}
	}
	a.spawn = newSpawner(forkParallelism)
	a.ctx, a.cancel = context.WithCancel(context.WithoutCancel(ctx))
	if err := a.recover(ctx); err != nil {
		a.Close()
		return nil, err
	}
	a.reacquireVolumes()
	if err := a.loadPools(ctx); err != nil {
		a.Close()
		return nil, err
	}
	if cfg.ReclaimInterval > 0 {
		a.wg.Go(a.reclaimLoop)
	}
	a.startWatchdog()
	a.startKeepWatch()
	a.startSampler()
	a.wg.Go(a.poolLoop)
	return a, nil
}

// Close stops the agent's timers and watchers. Sandboxes keep running; a
// new agent on the same DataDir adopts them. Warm pool members are the
// exception: they belong to this agent and are destroyed (pool.go); the
// pool configuration stays for the next agent. Paused sandboxes give up
// their kept host objects (keep.go) and stay paused.
func (a *Agent) Close() error {
	if !a.markClosed() {
		return nil
	}
	a.events.close()
	members := a.pools.close()
	a.cancel()
	a.wg.Wait()
	a.releaseAllKept("close")
	a.dropMembers(members)
	a.spawn.close()
	a.flushSamples()
	return nil
}

// markClosed closes the agent to new sandboxes and background work and
// stops every sandbox's timers; false when it was closed already.
func (a *Agent) markClosed() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return false
	}
	a.closed = true
	for _, h := range a.sandboxes {
		h.stopTimers()
	}
	return true
}

func (a *Agent) isClosed() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.closed
}

// goTracked runs f in a goroutine the agent's Close waits for; false
// (f does not run) once the agent is closed.
func (a *Agent) goTracked(f func()) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return false
	}
	a.wg.Go(f)
	return true
}

// tracked runs f, counted in what Close waits for, unless the agent is
// closed (the work of timers, which start outside the agent's goroutines).
func (a *Agent) tracked(f func()) {
	if !a.enter() {
		return
	}
	defer a.wg.Done()
	f()
}

func (a *Agent) enter() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return false
	}
	a.wg.Add(1)
	return true
}

// register puts new handle h in the map.
func (a *Agent) register(h *handle) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return fmt.Errorf("node agent: %w", errdefs.ErrUnavailable)
	}
	if _, ok := a.sandboxes[h.id]; ok {
		return fmt.Errorf("sandbox %q: %w", h.id, errdefs.ErrAlreadyExists)
	}
	a.sandboxes[h.id] = h
	return nil
}

// forget takes h out of the map: it is gone, its timers stopped, and its
// volumes released (under a.mu, so that a sandbox of the same ID that
// joins the map later keeps the volumes it acquires).
func (a *Agent) forget(h *handle) {
	a.mu.Lock()
	defer a.mu.Unlock()
	h.markGone()
	if a.sandboxes[h.id] == h {
		delete(a.sandboxes, h.id)
		a.releaseVolumes(h.id)
	}
}

func (a *Agent) lookup(id string) (*handle, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	h, ok := a.sandboxes[id]
	if !ok {
		return nil, a.goneErr(id)
	}
	return h, nil
}

// handles returns the handles in the map now.
func (a *Agent) handles() []*handle {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Collect(maps.Values(a.sandboxes))
}

// knownIDs returns the IDs of the handles in the map.
func (a *Agent) knownIDs() map[string]bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	known := make(map[string]bool, len(a.sandboxes))
	for id := range a.sandboxes {
		known[id] = true
	}
	return known
}

// Get implements Service.
func (a *Agent) Get(ctx context.Context, id string) (*nodeapi.Sandbox, error) {
	h, err := a.lookup(id)
	if err != nil {
		return nil, err
	}
	return h.view(), nil
}

// List implements Service.
func (a *Agent) List(ctx context.Context) ([]*nodeapi.Sandbox, error) {
	hs := a.handles()
	out := make([]*nodeapi.Sandbox, 0, len(hs))
	for _, h := range hs {
		if v, ok := h.listed(); ok {
			out = append(out, v)
		}
	}
	slices.SortFunc(out, func(x, y *nodeapi.Sandbox) int { return strings.Compare(x.ID, y.ID) })
	return out, nil
}

func (a *Agent) envdAddr(slot *netslot.Slot) string {
	return netip.AddrPortFrom(slot.GuestIP, uint16(a.cfg.EnvdPort)).String()
}

func clonePolicy(p netslot.Policy) netslot.Policy { return p.Clone() }

// SetEndTime implements Service: it re-arms the TTL backstop.
func (a *Agent) SetEndTime(ctx context.Context, id string, endAt time.Time) error {
	h, err := a.lookup(id)
	if err != nil {
		return err
	}
	if err := h.setEndTime(endAt); err != nil {
		return err
	}
	a.log.Debug("end time set", "sandbox_id", id, "end_at", endAt)
	return h.persist()
}

// UpdateNetwork implements Service.
func (a *Agent) UpdateNetwork(ctx context.Context, id string, policy netslot.Policy) error {
	h, err := a.lookup(id)
	if err != nil {
		return err
	}
	return h.updateNetwork(ctx, policy)
}

// Stats implements Service.
func (a *Agent) Stats(ctx context.Context, id string) (*nodeapi.Stats, error) {
	h, err := a.lookup(id)
	if err != nil {
		return nil, err
	}
	return h.stats(ctx)
}

// Capabilities implements Service.
func (a *Agent) Capabilities(ctx context.Context) (nodeapi.Capabilities, error) {
	dc := a.drv.Capabilities()
	_, ckpt := a.drv.(driver.Checkpointer)
	_, frz := a.drv.(driver.Freezer)
	return nodeapi.Capabilities{
		Driver:           a.drv.Name(),
		MemoryCheckpoint: dc.MemoryCheckpoint && ckpt,
		Freeze:           dc.Freeze && frz,
		Fork:             dc.MemoryCheckpoint && ckpt,
	}, nil
}

// Watch implements Service. Events that happened before the first watcher
// (recovery after a restart) are delivered to it first.
func (a *Agent) Watch(ctx context.Context) (<-chan nodeapi.Event, error) {
	return a.events.watch(ctx)
}

// Reclaimed returns how many leaked objects of each kind this agent has
// destroyed since it started.
func (a *Agent) Reclaimed() map[string]int {
	return a.reclaimed.get()
}

// reclaimCounts counts the leaked objects reclaimed, by kind.
type reclaimCounts struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *reclaimCounts) add(kind string, n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n[kind] += n
}

func (c *reclaimCounts) get() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.n)
}

func (a *Agent) countReclaimed(kind string, n int) {
	if n <= 0 {
		return
	}
	a.reclaimed.add(kind, n)
	a.reclaimCounter.WithLabelValues(kind).Add(float64(n))
}

func (a *Agent) reclaimLoop() {
	for {
		select {
		case <-a.ctx.Done():
			return
		case <-time.After(a.cfg.ReclaimInterval):
		}
		a.reclaimKnown()
	}
}

// reclaimKnown reclaims the host objects of no sandbox in the map, with
// no sandbox making host objects meanwhile.
func (a *Agent) reclaimKnown() {
	a.reclaimMu.Lock()
	defer a.reclaimMu.Unlock()
	known := a.knownIDs()
	a.reclaim(a.ctx, known, known)
}

// mergeEnv returns the template's environment overridden by the
// create-time variables.
func mergeEnv(tmpl, create map[string]string) map[string]string {
	out := maps.Clone(tmpl)
	if out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, create)
	return out
}
