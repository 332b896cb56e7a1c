// Package memhost is an in-memory host for the node agent: network slots,
// cgroups, root filesystem layers and envd that exist only as records.
// With the fake runtime driver it is the agent's host in the fake driver
// mode of warren (driver: fake, a named mode chosen by config for tests of
// the control plane and the CLI), and the host of the agent's own tests
// (through internal/node/nodetest). Each piece keeps its objects in
// memory, so that one instance shared by two agents stands for the host
// that outlives an agent restart, and tests can plant leaked objects and
// look at what is left.
package memhost

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/warren-sandbox/warren/internal/cgroup"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/netslot"
	"github.com/warren-sandbox/warren/internal/node"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/sandbox"
)

// Net is an in-memory netslot.Pool.
type Net struct {
	mu       sync.Mutex
	slots    map[string]*netslot.Slot // by netns name
	policies map[string]netslot.Policy
	adopted  map[string]bool
	next     int
	// AcquireErr, when set, makes Acquire fail.
	AcquireErr error
	updates    int
}

var _ netslot.Pool = (*Net)(nil)

// NewNet returns an empty pool.
func NewNet() *Net {
	return &Net{slots: map[string]*netslot.Slot{}, policies: map[string]netslot.Policy{}, adopted: map[string]bool{}}
}

// Acquire implements netslot.Pool.
func (n *Net) Acquire(ctx context.Context, id string, p netslot.Policy) (*netslot.Slot, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.AcquireErr != nil {
		return nil, n.AcquireErr
	}
	n.next++
	name := fmt.Sprintf("%s-%d", sandbox.HostName(id), n.next)
	s := &netslot.Slot{
		SandboxID: id, Index: n.next, NetNS: name, NetNSPath: "/var/run/netns/" + name,
		HostVeth: fmt.Sprintf("wh%d", n.next), GuestVeth: fmt.Sprintf("wg%d", n.next),
		HostIP:  netip.AddrFrom4([4]byte{100, 65, byte(n.next >> 6), byte(n.next<<2) | 1}),
		GuestIP: netip.AddrFrom4([4]byte{100, 65, byte(n.next >> 6), byte(n.next<<2) | 2}),
		Prefix:  30,
	}
	n.slots[name] = s
	n.policies[name] = p
	return s, nil
}

// Release implements netslot.Pool.
func (n *Net) Release(ctx context.Context, s *netslot.Slot) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.slots, s.NetNS)
	delete(n.policies, s.NetNS)
	return nil
}

// Update implements netslot.Pool.
func (n *Net) Update(ctx context.Context, s *netslot.Slot, p netslot.Policy) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.slots[s.NetNS]; !ok {
		return fmt.Errorf("slot %q: %w", s.NetNS, errdefs.ErrNotFound)
	}
	n.policies[s.NetNS] = p
	n.updates++
	return nil
}

// Updates returns how many policy updates were made.
func (n *Net) Updates() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.updates
}

// Adopt implements netslot.Pool.
func (n *Net) Adopt(ctx context.Context, s *netslot.Slot) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.slots[s.NetNS]; !ok {
		return fmt.Errorf("slot %q: %w", s.NetNS, errdefs.ErrNotFound)
	}
	n.adopted[s.NetNS] = true
	return nil
}

// ReclaimLeaked implements netslot.Pool.
func (n *Net) ReclaimLeaked(ctx context.Context, keep map[string]bool) (int, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	c := 0
	for name, s := range n.slots {
		if !keep[s.SandboxID] {
			delete(n.slots, name)
			delete(n.policies, name)
			c++
		}
	}
	return c, nil
}

// Plant adds a slot of sandbox id as if an earlier agent had left it.
func (n *Net) Plant(id string) {
	_, _ = n.Acquire(context.Background(), id, netslot.Policy{})
}

// Live returns the sandbox IDs that hold slots, sorted (one per slot).
func (n *Net) Live() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []string
	for _, s := range n.slots {
		out = append(out, s.SandboxID)
	}
	slices.Sort(out)
	return out
}

// Policy returns the policy of sandbox id's slot.
func (n *Net) Policy(id string) (netslot.Policy, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for name, s := range n.slots {
		if s.SandboxID == id {
			return n.policies[name], true
		}
	}
	return netslot.Policy{}, false
}

// Cgroups is an in-memory cgroup.Manager.
type Cgroups struct {
	mu     sync.Mutex
	groups map[string]*Cgroup
}

var _ cgroup.Manager = (*Cgroups)(nil)

// NewCgroups returns an empty manager.
func NewCgroups() *Cgroups { return &Cgroups{groups: map[string]*Cgroup{}} }

// Cgroup is one in-memory cgroup.
type Cgroup struct {
	m       *Cgroups
	name    string
	mu      sync.Mutex
	res     sandbox.Resources
	stats   cgroup.Stats
	oom     bool
	pidsMax bool
	weights []int // CPU weights set, in order
}

var (
	_ cgroup.Cgroup      = (*Cgroup)(nil)
	_ cgroup.CPUWeighter = (*Cgroup)(nil)
)

// SetCPUWeight implements cgroup.CPUWeighter.
func (c *Cgroup) SetCPUWeight(ctx context.Context, weight int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.weights = append(c.weights, weight)
	return nil
}

// CPUWeights returns the CPU weights set, in order.
func (c *Cgroup) CPUWeights() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.weights)
}

// Create implements cgroup.Manager.
func (m *Cgroups) Create(ctx context.Context, name string, res sandbox.Resources) (cgroup.Cgroup, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.groups[name]; ok {
		return nil, fmt.Errorf("cgroup %q: %w", name, errdefs.ErrAlreadyExists)
	}
	c := &Cgroup{m: m, name: name, res: res}
	m.groups[name] = c
	return c, nil
}

// Open implements cgroup.Manager.
func (m *Cgroups) Open(ctx context.Context, name string) (cgroup.Cgroup, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c, ok := m.groups[name]
	if !ok {
		return nil, fmt.Errorf("cgroup %q: %w", name, errdefs.ErrNotFound)
	}
	return c, nil
}

// List implements cgroup.Manager.
func (m *Cgroups) List(ctx context.Context) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for name := range m.groups {
		if strings.HasPrefix(name, "sbx-") {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out, nil
}

// Path implements cgroup.Manager.
func (m *Cgroups) Path(name string) string { return "/warren/" + name }

// Get returns cgroup name, if it exists.
func (m *Cgroups) Get(name string) (*Cgroup, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c, ok := m.groups[name]
	return c, ok
}

// Plant adds a cgroup as if an earlier agent had left it.
func (m *Cgroups) Plant(name string) {
	_, _ = m.Create(context.Background(), name, sandbox.Resources{})
}

// Names returns the existing cgroups, sorted.
func (m *Cgroups) Names() []string { n, _ := m.List(context.Background()); return n }

// Name implements cgroup.Cgroup.
func (c *Cgroup) Name() string { return c.name }

// Update implements cgroup.Cgroup.
func (c *Cgroup) Update(ctx context.Context, res sandbox.Resources) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.res = res
	return nil
}

// SetStats sets what Stats returns.
func (c *Cgroup) SetStats(s cgroup.Stats) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stats = s
}

// SetOOM sets what OOMKilled returns.
func (c *Cgroup) SetOOM(v bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.oom = v
}

// SetPidsLimitHit sets what PidsLimitHit returns.
func (c *Cgroup) SetPidsLimitHit(v bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pidsMax = v
}

// Resources returns the limits last set.
func (c *Cgroup) Resources() sandbox.Resources {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.res
}

// Stats implements cgroup.Cgroup.
func (c *Cgroup) Stats(ctx context.Context) (cgroup.Stats, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.stats
	if s.MemoryLimit == 0 {
		s.MemoryLimit = uint64(c.res.MemoryMB) << 20
	}
	return s, nil
}

// Procs implements cgroup.Cgroup.
func (c *Cgroup) Procs(ctx context.Context) ([]int, error) { return nil, nil }

// KillAll implements cgroup.Cgroup.
func (c *Cgroup) KillAll(ctx context.Context) error {
	c.m.mu.Lock()
	defer c.m.mu.Unlock()
	if c.m.groups[c.name] == c {
		delete(c.m.groups, c.name)
	}
	return nil
}

// OOMKilled implements cgroup.Cgroup.
func (c *Cgroup) OOMKilled(ctx context.Context) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.oom, nil
}

// PidsLimitHit implements cgroup.Cgroup.
func (c *Cgroup) PidsLimitHit(ctx context.Context) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pidsMax, nil
}

// Layers is an in-memory node.Layers.
type Layers struct {
	mu     sync.Mutex
	layers map[string]*Layer
	saved  map[string]*Layer
	// CreateErr, MountErr, CopyErr make those calls fail when set.
	CreateErr, MountErr, CopyErr error
}

// Layer is one sandbox's writable layer in memory.
type Layer struct {
	Lower   string
	SizeMB  int64
	Mounted bool
	// Files stands for the layer's contents; Copy copies it.
	Files map[string]string
	Used  uint64
}

var _ node.Layers = (*Layers)(nil)

// NewLayers returns an empty set of layers.
func NewLayers() *Layers { return &Layers{layers: map[string]*Layer{}, saved: map[string]*Layer{}} }

func rootOf(id string) string { return "/fake/rootfs/" + sandbox.HostName(id) }

// Create implements node.Layers.
func (l *Layers) Create(ctx context.Context, id, lower string, sizeMB int64) (string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.CreateErr != nil {
		return "", l.CreateErr
	}
	if _, ok := l.layers[id]; ok {
		return "", fmt.Errorf("layer %q: %w", id, errdefs.ErrAlreadyExists)
	}
	l.layers[id] = &Layer{Lower: lower, SizeMB: sizeMB, Mounted: true, Files: map[string]string{}}
	return rootOf(id), nil
}

// Mount implements node.Layers.
func (l *Layers) Mount(ctx context.Context, id, lower string) (string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.MountErr != nil {
		return "", l.MountErr
	}
	ly, ok := l.layers[id]
	if !ok {
		return "", fmt.Errorf("layer %q: %w", id, errdefs.ErrNotFound)
	}
	ly.Mounted, ly.Lower = true, lower
	return rootOf(id), nil
}

// Unmount implements node.Layers.
func (l *Layers) Unmount(ctx context.Context, id string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if ly, ok := l.layers[id]; ok {
		ly.Mounted = false
	}
	return nil
}

// Copy implements node.Layers.
func (l *Layers) Copy(ctx context.Context, src, dst string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.CopyErr != nil {
		return l.CopyErr
	}
	s, ok := l.layers[src]
	if !ok {
		return fmt.Errorf("layer %q: %w", src, errdefs.ErrNotFound)
	}
	if _, ok := l.layers[dst]; ok {
		return fmt.Errorf("layer %q: %w", dst, errdefs.ErrAlreadyExists)
	}
	l.layers[dst] = &Layer{Lower: s.Lower, SizeMB: s.SizeMB, Files: maps.Clone(s.Files), Used: s.Used}
	return nil
}

// Destroy implements node.Layers.
func (l *Layers) Destroy(ctx context.Context, id string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.layers, id)
	return nil
}

// Save implements node.Layers.
func (l *Layers) Save(ctx context.Context, id, name string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	s, ok := l.layers[id]
	if !ok {
		return fmt.Errorf("layer %q: %w", id, errdefs.ErrNotFound)
	}
	l.saved[name] = &Layer{Lower: s.Lower, SizeMB: s.SizeMB, Files: maps.Clone(s.Files), Used: s.Used}
	return nil
}

// CreateFrom implements node.Layers.
func (l *Layers) CreateFrom(ctx context.Context, id, name, lower string) (string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.CreateErr != nil {
		return "", l.CreateErr
	}
	s, ok := l.saved[name]
	if !ok {
		return "", fmt.Errorf("saved layer %q: %w", name, errdefs.ErrNotFound)
	}
	if _, ok := l.layers[id]; ok {
		return "", fmt.Errorf("layer %q: %w", id, errdefs.ErrAlreadyExists)
	}
	l.layers[id] = &Layer{Lower: lower, SizeMB: s.SizeMB, Mounted: true, Files: maps.Clone(s.Files), Used: s.Used}
	return rootOf(id), nil
}

// DeleteSaved implements node.Layers.
func (l *Layers) DeleteSaved(ctx context.Context, name string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.saved, name)
	return nil
}

// Saved returns the names of the saved layers, sorted.
func (l *Layers) Saved() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Sorted(maps.Keys(l.saved))
}

// Usage implements node.Layers.
func (l *Layers) Usage(ctx context.Context, id string) (uint64, uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ly, ok := l.layers[id]
	if !ok {
		return 0, 0, fmt.Errorf("layer %q: %w", id, errdefs.ErrNotFound)
	}
	return ly.Used, uint64(ly.SizeMB) << 20, nil
}

// ReclaimLeaked implements node.Layers.
func (l *Layers) ReclaimLeaked(ctx context.Context, mounted, known map[string]bool) (map[string]int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]int{}
	for id, ly := range l.layers {
		if ly.Mounted && !mounted[id] {
			ly.Mounted = false
			out["mount"]++
		}
		if !known[id] {
			delete(l.layers, id)
			out["layer"]++
		}
	}
	return out, nil
}

// Get returns a copy of sandbox id's layer.
func (l *Layers) Get(id string) (Layer, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ly, ok := l.layers[id]
	if !ok {
		return Layer{}, false
	}
	c := *ly
	c.Files = maps.Clone(ly.Files)
	return c, true
}

// WriteFile puts a file into sandbox id's layer.
func (l *Layers) WriteFile(id, name, content string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if ly, ok := l.layers[id]; ok {
		ly.Files[name] = content
		ly.Used += uint64(len(content))
	}
}

// Plant adds a layer as if an earlier agent had left it, mounted or not.
func (l *Layers) Plant(id string, mounted bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.layers[id] = &Layer{Mounted: mounted, Files: map[string]string{}}
}

// IDs returns the sandboxes that have a layer, sorted.
func (l *Layers) IDs() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Sorted(maps.Keys(l.layers))
}

// Envd is a fake of the envds of all sandboxes: it records the calls and
// can be told to fail.
type Envd struct {
	mu     sync.Mutex
	inits  []EnvdCall
	starts []EnvdCall
	runs   []EnvdCall
	// HealthErr, InitErr, StartErr make those calls fail when set.
	HealthErr, InitErr, StartErr error
	// RunFunc answers Run; nil answers exit code 0.
	RunFunc func(addr string, p node.EnvdProcess) (int, error)
	// ProbeFunc answers the watchdog's Probe; nil answers healthy with no
	// memory reading.
	ProbeFunc func(ctx context.Context, addr string) (node.EnvdHealth, error)
	// InitFunc, when set, runs at the start of every Init (a test can hold
	// one there).
	InitFunc func(ctx context.Context, addr string, req node.EnvdInit)
	probes   []string
}

var _ node.EnvdProber = (*Envd)(nil)

// Probe implements node.EnvdProber.
func (e *Envd) Probe(ctx context.Context, addr string) (node.EnvdHealth, error) {
	if f := e.recordProbe(addr); f != nil {
		return f(ctx, addr)
	}
	return node.EnvdHealth{}, nil
}

// recordProbe records a probe of addr and returns ProbeFunc.
func (e *Envd) recordProbe(addr string) func(ctx context.Context, addr string) (node.EnvdHealth, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.probes = append(e.probes, addr)
	return e.ProbeFunc
}

// SetProbe replaces ProbeFunc.
func (e *Envd) SetProbe(f func(ctx context.Context, addr string) (node.EnvdHealth, error)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.ProbeFunc = f
}

// Probes returns the addresses probed, in order.
func (e *Envd) Probes() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.probes)
}

// Run implements node.Envd.
func (e *Envd) Run(ctx context.Context, addr, accessToken string, p node.EnvdProcess) (int, error) {
	if f := e.recordRun(addr, p); f != nil {
		return f(addr, p)
	}
	return 0, nil
}

// recordRun records a Run of p at addr and returns RunFunc.
func (e *Envd) recordRun(addr string, p node.EnvdProcess) func(addr string, p node.EnvdProcess) (int, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.runs = append(e.runs, EnvdCall{Addr: addr, Process: p})
	return e.RunFunc
}

// Runs returns the recorded Run calls.
func (e *Envd) Runs() []EnvdCall {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.runs)
}

// EnvdCall is one recorded call.
type EnvdCall struct {
	Addr      string
	InitToken string
	Init      node.EnvdInit
	Process   node.EnvdProcess
}

var _ node.Envd = (*Envd)(nil)

// WaitHealthy implements node.Envd.
func (e *Envd) WaitHealthy(ctx context.Context, addr string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.HealthErr
}

// Init implements node.Envd.
func (e *Envd) Init(ctx context.Context, addr, token string, req node.EnvdInit) error {
	if f := e.initFunc(); f != nil {
		f(ctx, addr, req)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.InitErr != nil {
		return e.InitErr
	}
	e.inits = append(e.inits, EnvdCall{Addr: addr, InitToken: token, Init: req})
	return nil
}

func (e *Envd) initFunc() func(ctx context.Context, addr string, req node.EnvdInit) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.InitFunc
}

// Start implements node.Envd.
func (e *Envd) Start(ctx context.Context, addr, accessToken string, p node.EnvdProcess) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.StartErr != nil {
		return e.StartErr
	}
	e.starts = append(e.starts, EnvdCall{Addr: addr, Process: p})
	return nil
}

var _ node.EnvdLogs = (*Envd)(nil)

// Logs implements node.EnvdLogs: the lines an envd at addr would keep of
// what it was asked (its /init, then each process started), from start
// on; a token other than the one /init set is refused, as envd refuses
// it.
func (e *Envd) Logs(ctx context.Context, addr, accessToken string, start time.Time) ([]nodeapi.LogEntry, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	var init *EnvdCall
	for i := range e.inits {
		if e.inits[i].Addr == addr {
			init = &e.inits[i]
		}
	}
	if init == nil {
		return nil, fmt.Errorf("envd at %s: no answer: %w", addr, errdefs.ErrUnavailable)
	}
	if init.Init.AccessToken != "" && accessToken != init.Init.AccessToken {
		return nil, fmt.Errorf("envd at %s: wrong access token: %w", addr, errdefs.ErrUnauthorized)
	}
	at := init.Init.Timestamp
	out := []nodeapi.LogEntry{{Timestamp: at, Level: "info", Message: "envd initialized", Fields: map[string]string{"addr": addr}}}
	for _, s := range e.starts {
		if s.Addr == addr {
			at = at.Add(time.Millisecond)
			out = append(out, nodeapi.LogEntry{Timestamp: at, Level: "info", Message: "process started: " + s.Process.Cmd, Fields: map[string]string{}})
		}
	}
	return slices.DeleteFunc(out, func(l nodeapi.LogEntry) bool { return l.Timestamp.Before(start) }), nil
}

// Inits returns the recorded /init calls.
func (e *Envd) Inits() []EnvdCall {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.inits)
}

// Starts returns the recorded process starts.
func (e *Envd) Starts() []EnvdCall {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.starts)
}

// SetErrors sets the scripted failures.
func (e *Envd) SetErrors(health, init, start error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.HealthErr, e.InitErr, e.StartErr = health, init, start
}
