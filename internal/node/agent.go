package node

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warren-sandbox/warren/internal/cgroup"
	"github.com/warren-sandbox/warren/internal/driver"
	"github.com/warren-sandbox/warren/internal/envd/process"
	"github.com/warren-sandbox/warren/internal/envdproto"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/netslot"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/sandbox"
)

// EnvdVersion is the envd protocol version the node reports for its
// sandboxes (the envd it mounts into them).
const EnvdVersion = envdproto.Version

// Defaults of Config.
const (
	DefaultEnvdPort        = envdproto.Port
	DefaultBackstopGrace   = 2 * time.Minute
	DefaultReclaimInterval = 5 * time.Minute
	// DefaultResolvConf is a sandbox's /etc/resolv.conf: public resolvers,
	// since the host's own (often on loopback or a private address) lies
	// in the ranges no sandbox reaches.
	DefaultResolvConf       = "nameserver 8.8.8.8\nnameserver 1.1.1.1\n"
	DefaultReadyTimeout     = 60 * time.Second
	DefaultMinFreeDiskBytes = 1 << 30
	// envdMountPath is where envd's binary is bound, read-only, in every
	// sandbox.
	envdMountPath = "/.warren/envd"
	// startCmdTag is the envd process tag of a template's start command
	// (envd keeps that process's output in the sandbox's log).
	startCmdTag = process.StartCmdTag
)

// Config configures an Agent. Driver, Cgroups, Net and Layers are required.
type Config struct {
	// DataDir holds the per-sandbox directories (state record, OCI bundle,
	// memory snapshot) under DataDir/sandboxes/sbx-<id>/.
	DataDir string
	Driver  driver.Driver
	Cgroups cgroup.Manager
	Net     netslot.Pool
	Layers  Layers
	// Volumes mounts the sandboxes' volumes (volumes.go); nil: the node
	// keeps none, and a create that asks for one is ErrUnsupported.
	Volumes VolumeMounter
	// EnvdPath is the host path of the envd binary bound into sandboxes.
	EnvdPath string
	// EnvdPort is the port envd listens on inside the sandbox (49983).
	EnvdPort int
	// Envd talks to the envds; nil means HTTP (NewHTTPEnvd).
	Envd Envd
	// BackstopGrace is how long after a sandbox's end time the node stops
	// it by itself (docs/lifecycle.md §2); default 2 minutes.
	BackstopGrace time.Duration
	// DefaultResources fill the zero fields of a create's resources.
	DefaultResources sandbox.Resources
	// ReadyTimeout bounds the start of a sandbox: the runtime's start or
	// restore and the wait for its envd; default 60 s.
	ReadyTimeout time.Duration
	// MinFreeDiskBytes is the free space under DataDir below which a pause
	// with memory is refused (ErrExhausted); default 1 GiB. Negative
	// disables the check.
	MinFreeDiskBytes int64
	// FreeDisk reports the free bytes of the file system holding path; nil
	// means statfs.
	FreeDisk func(path string) (uint64, error)
	// ReclaimInterval is how often leaked host objects are looked for
	// after the start-up pass; default 5 minutes, negative disables.
	ReclaimInterval time.Duration
	// Hostname, ResolvConf and Hosts shape every sandbox's network
	// identity; empty means the defaults below.
	Hostname   string
	ResolvConf string
	// WatchdogMin and WatchdogMax bound the jittered interval between two
	// health probes of a running sandbox (docs/lifecycle.md §5); defaults
	// 25 s and 40 s. A negative WatchdogMin disables the watchdog.
	WatchdogMin, WatchdogMax time.Duration
	// ProbeTimeout bounds one health probe; default 5 s.
	ProbeTimeout time.Duration
	// MetricsInterval is how often each running sandbox's CPU, memory and
	// disk use is sampled for getMetrics; default 5 s, negative disables.
	MetricsInterval time.Duration
	// MetricsRetention is how long samples are kept; default 1 hour.
	MetricsRetention time.Duration
	// KeepPaused bounds the paused sandboxes whose host objects (network
	// slot, cgroup, root filesystem's mount, and a runtime container made
	// ready for the restore) stay after a pause with memory, so that a
	// resume only restores memory (keep.go): the KeepPaused most recently
	// paused, each for at most KeepPausedFor, and none while the host's
	// available memory is below KeepPausedMinFreeMemory. Defaults 8, 10
	// minutes and 1 GiB; a negative KeepPaused keeps none. Only a driver
	// that is a driver.RestorePreparer keeps any.
	KeepPaused              int
	KeepPausedFor           time.Duration
	KeepPausedMinFreeMemory int64
	// FreeMemory reports the host's available memory in bytes; nil means
	// MemAvailable of /proc/meminfo.
	FreeMemory func() (uint64, error)
	// PoolConcurrency bounds how many warm pool members are made at once;
	// default 2 (pool.go).
	PoolConcurrency int
	// SnapshotRuntime names the runtime's build and platform in what a
	// template snapshot records of its host (nodeapi.SnapshotHost.Runtime),
	// for another node to tell whether it can restore it; empty: the
	// agent's template snapshots do not travel.
	SnapshotRuntime string
	// CPUInfo is the file the host's CPU flags are read from; default
	// /proc/cpuinfo.
	CPUInfo string
	// Registry receives the agent's metrics; nil registers nothing.
	Registry prometheus.Registerer
	// CountKills registers sandbox_killed_total{kill_reason} on Registry:
	// every kill the agent carries out, by reason (kills.go). `warren
	// node` sets it; under `warren serve` the control plane's counter of
	// that name, on the same registry, counts every kill.
	CountKills bool
	Logger     *slog.Logger
	// Clock is the time source; nil means the real clock.
	Clock Clock
}

func (c *Config) setDefaults() error {
	if c.DataDir == "" {
		return fmt.Errorf("node config: data dir: %w", errdefs.ErrInvalid)
	}
	if c.Driver == nil || c.Cgroups == nil || c.Net == nil || c.Layers == nil {
		return fmt.Errorf("node config: driver, cgroups, net and layers are required: %w", errdefs.ErrInvalid)
	}
	if c.EnvdPort == 0 {
		c.EnvdPort = DefaultEnvdPort
	}
	if c.Envd == nil {
		c.Envd = NewHTTPEnvd(nil)
	}
	if c.BackstopGrace == 0 {
		c.BackstopGrace = DefaultBackstopGrace
	}
	if c.BackstopGrace < 0 {
		return fmt.Errorf("node config: backstop grace %s: %w", c.BackstopGrace, errdefs.ErrInvalid)
	}
	if c.ReadyTimeout == 0 {
		c.ReadyTimeout = DefaultReadyTimeout
	}
	if c.MinFreeDiskBytes == 0 {
		c.MinFreeDiskBytes = DefaultMinFreeDiskBytes
	}
	if c.FreeDisk == nil {
		c.FreeDisk = freeDisk
	}
	if c.ReclaimInterval == 0 {
		c.ReclaimInterval = DefaultReclaimInterval
	}
	if err := c.watchdogDefaults(); err != nil {
		return err
	}
	if err := c.samplesDefaults(); err != nil {
		return err
	}
	if err := c.keepDefaults(); err != nil {
		return err
	}
	if c.PoolConcurrency <= 0 {
		c.PoolConcurrency = DefaultPoolConcurrency
	}
	if c.Hostname == "" {
		c.Hostname = "e2b.local"
	}
	if c.ResolvConf == "" {
		c.ResolvConf = DefaultResolvConf
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.CPUInfo == "" {
		c.CPUInfo = "/proc/cpuinfo"
	}
	if c.Clock == nil {
		c.Clock = realClock{}
	}
	r := &c.DefaultResources
	if r.VCPUs == 0 {
		r.VCPUs = 2
	}
	if r.MemoryMB == 0 {
		r.MemoryMB = 512
	}
	if r.DiskMB == 0 {
		r.DiskMB = 1024
	}
	if r.Pids == 0 {
		r.Pids = 1024
	}
	return nil
}

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
	drv driver.Driver

	// reclaimMu is held for reading while host objects of a sandbox are
	// made (create, resume, fork) and for writing by the periodic reclaim,
	// so that a reclaim never sees objects of a sandbox not yet known.
	reclaimMu sync.RWMutex

	mu        sync.Mutex
	sandboxes map[string]*sbx
	subs      map[chan nodeapi.Event]struct{}
	backlog   []nodeapi.Event
	reclaimed map[string]int
	closed    bool
	// draining: the control plane drains the node (keep.go's SetDraining).
	draining bool

	// kills are the agent's own kills not acknowledged yet (kills.go).
	kills  *killJournal
	killed *prometheus.CounterVec

	reclaimCounter *prometheus.CounterVec
	wd             watchdogMetrics
	opDur          *prometheus.HistogramVec
	phaseDur       *prometheus.HistogramVec
	pm             poolMetrics
	pools          map[string]*pool // by template ID; guarded by mu
	reserved       map[string]*sbx  // pool members handed out by Reserve
	poolsMu        sync.Mutex       // serialises writes of pools.json
	poolMaking     int
	claiming       int // claims in flight (pool.go); guarded by mu
	spawn          *spawner

	ctx    context.Context // ends at Close
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// sbx is the agent's in-memory view of one sandbox.
type sbx struct {
	// op serialises the operations that change the sandbox's host objects
	// (create, pause, resume, fork's checkpoint, kill, exit handling).
	op sync.Mutex
	// persistMu orders the writes of the state record.
	persistMu sync.Mutex

	// Guarded by Agent.mu.
	rec           record
	cg            cgroup.Cgroup
	backstop      Timer
	backstopAt    time.Time
	backstopFloor time.Time // a refused pause pushed the backstop to at least this
	stopWatch     context.CancelFunc
	checkpointing bool
	kept          *keptObjects // host objects kept while paused (keep.go)
	gone          bool         // killed or exited; removed from the map
	internal      bool         // the agent's own (template snapshot): not listed, no events
	lastCPU       uint64
	lastCPUAt     time.Time
	watch         watchState
	samples       sampleRing
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
		sandboxes: map[string]*sbx{},
		subs:      map[chan nodeapi.Event]struct{}{},
		reclaimed: map[string]int{},
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
	a.pm = newPoolMetrics()
	a.pools, a.reserved = map[string]*pool{}, map[string]*sbx{}
	for _, k := range []string{"container", "cgroup", "network", "mount", "loop_device", "layer", "state_dir", "fork_image"} {
		a.reclaimCounter.WithLabelValues(k)
	}
	if cfg.Registry != nil {
		for _, c := range append([]prometheus.Collector{a.reclaimCounter, a.opDur, &capacityCollector{a: a}, a.pm.claims, a.pm.ready, a.phaseDur}, a.watchdogCollectors()...) {
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
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil
	}
	a.closed = true
	for _, s := range a.sandboxes {
		a.stopTimersLocked(s)
	}
	for ch := range a.subs {
		delete(a.subs, ch)
		close(ch)
	}
	members := a.takeMembersLocked()
	a.mu.Unlock()
	a.cancel()
	a.wg.Wait()
	a.releaseAllKept("close")
	a.dropMembers(members)
	a.spawn.close()
	a.flushSamples()
	return nil
}

// Reclaimed returns how many leaked objects of each kind this agent has
// destroyed since it started.
func (a *Agent) Reclaimed() map[string]int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return maps.Clone(a.reclaimed)
}

func (a *Agent) lookup(id string) (*sbx, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	s, ok := a.sandboxes[id]
	if !ok {
		return nil, a.goneErr(id)
	}
	return s, nil
}

// Get implements Service.
func (a *Agent) Get(ctx context.Context, id string) (*nodeapi.Sandbox, error) {
	s, err := a.lookup(id)
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.viewLocked(s), nil
}

// List implements Service.
func (a *Agent) List(ctx context.Context) ([]*nodeapi.Sandbox, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]*nodeapi.Sandbox, 0, len(a.sandboxes))
	for _, s := range a.sandboxes {
		if s.rec.State == sandbox.StateStarting || s.internal {
			continue
		}
		out = append(out, a.viewLocked(s))
	}
	slices.SortFunc(out, func(x, y *nodeapi.Sandbox) int {
		if x.ID < y.ID {
			return -1
		}
		if x.ID > y.ID {
			return 1
		}
		return 0
	})
	return out, nil
}

func (a *Agent) viewLocked(s *sbx) *nodeapi.Sandbox {
	r := &s.rec
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
		Network:          clonePolicy(r.Network),
		EnvdVersion:      r.EnvdVersion,
		Metadata:         maps.Clone(r.Metadata),
		PausedWithMemory: r.PausedWithMemory,
		Health:           s.healthLocked(),
	}
	if r.State == sandbox.StateRunning && r.Slot != nil {
		v.Host = r.Slot.GuestIP.String()
		v.Address = a.envdAddr(r.Slot)
	}
	return v
}

func (a *Agent) envdAddr(slot *netslot.Slot) string {
	return netip.AddrPortFrom(slot.GuestIP, uint16(a.cfg.EnvdPort)).String()
}

func clonePolicy(p netslot.Policy) netslot.Policy {
	return netslot.Policy{Internet: p.Internet, AllowOut: slices.Clone(p.AllowOut), DenyOut: slices.Clone(p.DenyOut)}
}

// SetEndTime implements Service: it re-arms the TTL backstop.
func (a *Agent) SetEndTime(ctx context.Context, id string, endAt time.Time) error {
	s, err := a.lookup(id)
	if err != nil {
		return err
	}
	a.mu.Lock()
	if s.gone {
		a.mu.Unlock()
		return a.goneErr(id)
	}
	s.rec.EndAt = endAt
	if s.rec.State == sandbox.StateRunning {
		a.armBackstopLocked(s)
	}
	a.mu.Unlock()
	a.log.Debug("end time set", "sandbox_id", id, "end_at", endAt)
	return a.persist(s)
}

// UpdateNetwork implements Service.
func (a *Agent) UpdateNetwork(ctx context.Context, id string, policy netslot.Policy) error {
	s, err := a.lookup(id)
	if err != nil {
		return err
	}
	s.op.Lock()
	defer s.op.Unlock()
	a.mu.Lock()
	state, slot, gone := s.rec.State, s.rec.Slot, s.gone
	a.mu.Unlock()
	if gone {
		return a.goneErr(id)
	}
	// A paused sandbox that keeps its slot (keep.go) holds it already.
	if slot != nil && (state == sandbox.StateRunning || state == sandbox.StatePaused) {
		if err := a.cfg.Net.Update(ctx, slot, policy); err != nil {
			return fmt.Errorf("sandbox %q: update network: %w", id, err)
		}
	}
	// Any other paused sandbox takes the policy when it resumes.
	a.mu.Lock()
	s.rec.Network = clonePolicy(policy)
	a.mu.Unlock()
	return a.persist(s)
}

// Stats implements Service.
func (a *Agent) Stats(ctx context.Context, id string) (*nodeapi.Stats, error) {
	s, err := a.lookup(id)
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	state, cg, res := s.rec.State, s.cg, s.rec.Resources
	a.mu.Unlock()
	if state != sandbox.StateRunning || cg == nil {
		return nil, fmt.Errorf("sandbox %q is %s: %w", id, state, errdefs.ErrConflict)
	}
	cs, err := cg.Stats(ctx)
	if err != nil {
		return nil, fmt.Errorf("sandbox %q: stats: %w", id, err)
	}
	now := a.clock.Now()
	st := &nodeapi.Stats{
		At:              now,
		CPUCount:        res.VCPUs,
		MemoryUsedBytes: cs.MemoryBytes,
		MemoryPeakBytes: cs.MemoryPeakBytes,
		MemoryTotal:     memoryTotal(res, cs),
	}
	if used, total, err := a.cfg.Layers.Usage(ctx, id); err == nil {
		st.DiskUsedBytes, st.DiskTotalBytes = used, total
	} else {
		a.log.Debug("layer usage", "sandbox_id", id, "error", err)
	}
	a.mu.Lock()
	if !s.lastCPUAt.IsZero() && now.After(s.lastCPUAt) && cs.CPUUsageNanos >= s.lastCPU && res.VCPUs > 0 {
		st.CPUUsedPct = 100 * float64(cs.CPUUsageNanos-s.lastCPU) / float64(now.Sub(s.lastCPUAt).Nanoseconds()) / float64(res.VCPUs)
	}
	s.lastCPU, s.lastCPUAt = cs.CPUUsageNanos, now
	a.mu.Unlock()
	return st, nil
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
	ch := make(chan nodeapi.Event, 256)
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil, fmt.Errorf("node agent: %w", errdefs.ErrUnavailable)
	}
	for _, ev := range a.backlog {
		ch <- ev
	}
	a.backlog = nil
	a.subs[ch] = struct{}{}
	a.mu.Unlock()
	context.AfterFunc(ctx, func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		if _, ok := a.subs[ch]; ok {
			delete(a.subs, ch)
			close(ch)
		}
	})
	return ch, nil
}

const maxBacklog = 256

func (a *Agent) emit(ev nodeapi.Event) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.subs) == 0 {
		if len(a.backlog) < maxBacklog {
			a.backlog = append(a.backlog, ev)
		}
		return
	}
	for ch := range a.subs {
		select {
		case ch <- ev:
		default:
			a.log.Warn("watcher too slow, event dropped", "sandbox_id", ev.SandboxID, "event", ev.Type)
		}
	}
}

// persist writes s's record.
func (a *Agent) persist(s *sbx) error {
	s.persistMu.Lock()
	defer s.persistMu.Unlock()
	a.mu.Lock()
	r := s.rec
	gone := s.gone
	a.mu.Unlock()
	if gone {
		return nil
	}
	return writeRecord(sandboxDir(a.cfg.DataDir, r.ID), &r)
}

// persistRecord writes r as the record of s before s.rec takes it (a
// claim writes beside its /init); the caller holds s.op, so no other
// change of s.rec is written in between.
func (a *Agent) persistRecord(s *sbx, r record) error {
	s.persistMu.Lock()
	defer s.persistMu.Unlock()
	a.mu.Lock()
	gone := s.gone
	a.mu.Unlock()
	if gone {
		return nil
	}
	return writeRecord(sandboxDir(a.cfg.DataDir, r.ID), &r)
}

func (a *Agent) countReclaimed(kind string, n int) {
	if n <= 0 {
		return
	}
	a.mu.Lock()
	a.reclaimed[kind] += n
	a.mu.Unlock()
	a.reclaimCounter.WithLabelValues(kind).Add(float64(n))
}

func (a *Agent) reclaimLoop() {
	for {
		select {
		case <-a.ctx.Done():
			return
		case <-time.After(a.cfg.ReclaimInterval):
		}
		a.reclaimMu.Lock()
		a.mu.Lock()
		known := map[string]bool{}
		for id := range a.sandboxes {
			known[id] = true
		}
		a.mu.Unlock()
		a.reclaim(a.ctx, known, known)
		a.reclaimMu.Unlock()
	}
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
