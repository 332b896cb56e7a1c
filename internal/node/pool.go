package node

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warren-sandbox/warren/internal/cgroup"
	"github.com/warren-sandbox/warren/internal/driver"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/netslot"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/sandbox"
)

// Warm pools (docs/lifecycle.md §6): per template, the node keeps a number of
// ready sandboxes, started and left idle (see makeMember), as the agent's
// own internal sandboxes: not listed, no events, never probed or sampled.
// A create claims one in two steps:
// the control plane calls Reserve, which takes a ready member out of the
// pool and answers its ID, and then Create with that ID, which
// re-initialises the member's envd (/init with the create's environment,
// access token, user, workdir and task limit) instead of starting a
// sandbox. A member serves creates of its disk size and at least its
// memory, whatever their CPUs and task limit: the claim resizes its cgroup
// and the driver's limits (the guest's CPU count and memory size stay what
// it read at boot until a resume; see docs/metrics.md, "What a create from
// the pool gets"). From then
// on the member is an ordinary started sandbox, in a new epoch. If the
// claim fails, the member is destroyed and Create starts a sandbox of that
// ID the usual way. Pools refill in the background, at most
// Config.PoolConcurrency members being made at a time; a pool whose
// template build changes, or whose size drops, destroys its extra members.
// A create that asks for another build of a pooled template (the template
// was rebuilt) misses, and switches the pool to that build
// (followBuild).
// Pool members belong to the running agent: Close destroys them (the
// ready ones, the reserved ones not yet claimed, and those being made,
// which see the agent closed when they are done). After a crash the next
// agent's start reclaims them like any internal sandbox. Either way the
// new agent refills its pools.
//
// Pool configuration is persisted by the node (pool_persist.go) and set
// again when the agent restarts.

// DefaultPoolConcurrency bounds how many pool members are made at once.
const DefaultPoolConcurrency = 2

// poolTick is how often the pools are checked for members to make.
const poolTick = time.Second

var _ nodeapi.Pooler = (*Agent)(nil)

type poolMetrics struct {
	claims *prometheus.CounterVec
	ready  *prometheus.GaugeVec
}

func newPoolMetrics() poolMetrics {
	return poolMetrics{
		claims: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandbox_pool_claims_total",
			Help: "Creates that asked a warm pool for a sandbox, by template and result (hit, miss).",
		}, []string{"template", "result"}),
		ready: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sandbox_pool_ready",
			Help: "Ready sandboxes in the warm pool of each template on this node.",
		}, []string{"template"}),
	}
}

// SetPool implements Pooler.
func (a *Agent) SetPool(ctx context.Context, tmpl nodeapi.Template, res sandbox.Resources, size int) error {
	if size < 0 {
		return fmt.Errorf("pool of template %q: size %d: %w", tmpl.ID, size, errdefs.ErrInvalid)
	}
	if tmpl.ID == "" || size > 0 && tmpl.RootFS == "" && tmpl.SnapshotDir == "" {
		return fmt.Errorf("pool of template %q: no root filesystem on this node: %w", tmpl.ID, errdefs.ErrInvalid)
	}
	res = a.resources(res)
	drop, err := a.pools.set(tmpl, res, size)
	if err != nil {
		return err
	}
	for _, h := range drop {
		a.dropMember(ctx, h)
	}
	if err := a.savePools(); err != nil {
		return err
	}
	a.log.Info("warm pool set", "template_id", tmpl.ID, "build_id", tmpl.BuildID, "size", size)
	return nil
}

// Reserve implements Pooler.
func (a *Agent) Reserve(tmpl nodeapi.Template, res sandbox.Resources) (string, bool) {
	h, sw := a.pools.reserve(tmpl, a.resources(res))
	if sw != nil {
		a.goTracked(func() { a.followBuild(sw) })
	}
	if h == nil {
		return "", false
	}
	return h.id, true
}

// followBuild switches a pool to the build a create asked for (the
// template was rebuilt since the pool was set), as SetPool of it with the
// pool's resources and size does: the old build's members go and the pool
// refills with the new one, without a restart or an admin call.
func (a *Agent) followBuild(sw *buildSwitch) {
	tmpl := sw.tmpl
	if err := a.SetPool(a.ctx, tmpl, sw.res, sw.size); err != nil {
		a.log.Warn("warm pool: switch to the template's new build", "template_id", tmpl.ID, "build_id", tmpl.BuildID, "error", err)
		return
	}
	a.log.Info("warm pool follows the template's new build", "template_id", tmpl.ID, "from_build_id", sw.from, "build_id", tmpl.BuildID)
}

// memberPolicy is the network policy pool members are made with: the
// API's default for a create (internet on, no lists).
var memberPolicy = netslot.Policy{Internet: true}

// samePolicy reports whether network policies a and b are the same.
func samePolicy(a, b netslot.Policy) bool { return a.Equal(b) }

// serves reports whether the pool's members can become a sandbox of res
// (defaults applied): one of the same disk size and at least the members'
// memory, whatever its CPUs and task limit; the claim sets the limits
// (see handle.claim). The writable layer's size is set when it is made.
// The guest reads its memory size at boot and /tmp is sized from it
// (half), so a claim of more memory keeps the member's /tmp, below half
// of the create's memory as in a cold start; less memory would let a full
// /tmp reach the host wall.
func (p *pool) serves(res sandbox.Resources) bool {
	return res.MemoryMB >= p.res.MemoryMB && res.DiskMB == p.res.DiskMB
}

// Unreserve implements Pooler.
func (a *Agent) Unreserve(id string) {
	if h, back := a.pools.unreserve(id); h != nil && !back {
		a.dropMember(a.ctx, h)
	}
}

// Pools implements Pooler.
func (a *Agent) Pools() map[string]nodeapi.PoolStatus {
	return a.pools.status()
}

func (a *Agent) dropMember(ctx context.Context, h *handle) {
	h.discard(ctx, a.log.With("sandbox_id", h.id, "kill_reason", "pool_shrink"))
}

// dropMembers destroys pool members, a few at a time.
func (a *Agent) dropMembers(members []*handle) {
	if len(members) == 0 {
		return
	}
	ctx := context.WithoutCancel(a.ctx)
	sem := make(chan struct{}, a.cfg.PoolConcurrency)
	var wg sync.WaitGroup
	for _, h := range members {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			h.discard(ctx, a.log.With("sandbox_id", h.id, "kill_reason", "pool_close"))
		})
	}
	wg.Wait()
	a.log.Info("warm pool members destroyed at close", "count", len(members))
}

func (a *Agent) poolLoop() {
	for a.sleep(poolTick) {
		a.fillPools()
	}
}

// fillPools starts the members the pools lack, within the concurrency
// limit, unless a claim is in flight (the next tick tries again). Members
// are made in the background (startMode.background): a refill yields the
// CPUs to the sandboxes just claimed.
func (a *Agent) fillPools() {
	for _, j := range a.pools.due(a.cfg.PoolConcurrency) {
		if !a.goTracked(func() { a.makeMember(j) }) {
			a.pools.made(j, nil, false)
		}
	}
}

// makeMember starts one pool member. It is left running, idle: not
// frozen, so that a claim has no thaw to wait for (an idle runsc member
// uses about 0.4 % of a CPU; a runsc resume costs a claim 20-150 ms).
// Its network policy is the API's default (internet on), which most
// creates keep, so that their claims need no network update.
//
// j's pool counts the member as being made, which it leaves whatever the
// pool became meanwhile (another build, other resources, removed); the
// member joins it only if it is still the template's pool and still wants
// a member of j's build and resources (warmPools.made).
func (a *Agent) makeMember(j memberJob) {
	tmpl, res := j.tmpl, j.res
	ctx := a.ctx
	id := sandbox.NewID()
	log := a.log.With("sandbox_id", id, "template_id", tmpl.ID, "pool", true)
	_, err := a.create(ctx, nodeapi.CreateRequest{ID: id, Template: tmpl, Resources: res, Network: memberPolicy}, true)
	var h *handle
	if err == nil {
		h, err = a.lookup(id)
	}
	var ferr error
	if err == nil {
		ferr = h.foreground()
	}
	keep := a.pools.made(j, h, err == nil && ferr == nil)
	switch {
	case err != nil:
		log.Warn("make pool member", "error", err)
	case ferr != nil:
		log.Warn("make pool member", "error", ferr)
		a.dropMember(context.WithoutCancel(ctx), h)
	case !keep:
		a.dropMember(context.WithoutCancel(ctx), h)
	default:
		log.Debug("pool member ready")
	}
}

// foreground gives ready member s the default CPU weight back (it was
// made in the background), so that a claimed member competes for the CPUs
// as any sandbox does.
func (h *handle) foreground() error {
	w, ok := h.get().cg.(cgroup.CPUWeighter)
	if !ok {
		return nil
	}
	if err := w.SetCPUWeight(h.a.ctx, cgroup.DefaultCPUWeight); err != nil && !errdefs.IsUnsupported(err) {
		return fmt.Errorf("pool member %q: default CPU weight: %w", h.id, err)
	}
	return nil
}

// claim turns reserved pool member req.ID into the sandbox req asks for.
// It reports false when req.ID is no reserved member, or when the claim
// failed (the member is then destroyed and the ID free for a plain
// create).
func (a *Agent) claim(ctx context.Context, req nodeapi.CreateRequest) (*nodeapi.Sandbox, bool) {
	ph := a.phases("claim")
	h := a.pools.beginClaim(req.ID)
	if h == nil {
		return nil, false
	}
	defer a.pools.endClaim()
	ph.done("lookup")
	log := a.log.With("sandbox_id", req.ID, "execution_id", req.ExecutionID, "template_id", req.Template.ID, "team_id", req.TeamID)
	v, err := h.claim(ctx, req, ph)
	if err != nil {
		log.Warn("claim of a warm pool member failed; starting a sandbox instead", "error", err)
		a.dropMember(context.WithoutCancel(ctx), h)
		return nil, false
	}
	log.Info("sandbox created from the warm pool", append([]any{"address", v.Address}, ph.observe(a.phaseDur)...)...)
	return v, true
}

// claim does the claim of member h under h.op. Its phases: lock (op),
// network (only when the create's policy is not the member's), resize
// (only when the create's CPUs or task limit differ from the member's),
// init (envd's /init with the create's environment, token and task limit)
// and record: the claimed state record is written (and synced) beside the
// /init, so record is only what is left of the write once /init answered.
// The claim's start, from which the end time counts (endAt), is when both
// begin. A record written for a claim that then fails goes with the
// member, which the caller destroys. The claimed sandbox is in a new
// epoch, whose exit is watched.
func (h *handle) claim(ctx context.Context, req nodeapi.CreateRequest, ph *phaseTimer) (*nodeapi.Sandbox, error) {
	a := h.a
	h.op.Lock()
	defer h.op.Unlock()
	h.awaitPrepare()
	st := h.get()
	if st.gone || st.rec.State != sandbox.StateRunning || st.rec.Slot == nil {
		return nil, fmt.Errorf("pool member is gone: %w", errdefs.ErrNotFound)
	}
	r, cg := st.rec, st.cg
	ph.done("lock")
	if !samePolicy(r.Network, req.Network) {
		if err := a.cfg.Net.Update(ctx, r.Slot, req.Network); err != nil {
			return nil, fmt.Errorf("network: %w", err)
		}
		ph.done("network")
	}
	res := a.resources(req.Resources)
	if res != r.Resources {
		if err := a.resize(ctx, r.ID, cg, res); err != nil {
			return nil, err
		}
		ph.done("resize")
	}
	claimed := claimedRecord(r, req, res, a.clock.Now())
	// The record is written beside the /init; this function waits for
	// the write before it returns, so the write is under h.op too.
	written := make(chan error, 1)
	go func() { written <- h.persistRecord(claimed) }()
	addr := a.envdAddr(r.Slot)
	rctx, cancel := context.WithTimeout(ctx, a.cfg.ReadyTimeout)
	defer cancel()
	init := EnvdInit{
		EnvVars:        mergeEnv(req.Template.Env, req.EnvVars),
		AccessToken:    req.EnvdAccessToken,
		DefaultUser:    orDefault(req.Template.User, "user"),
		DefaultWorkdir: orDefault(req.Template.Workdir, "/home/user"),
		Timestamp:      a.clock.Now().UTC(),
		TasksLimit:     res.TasksPerUser(),
	}
	initErr := a.cfg.Envd.Init(rctx, addr, r.InitToken, init)
	if initErr == nil {
		initErr = h.trustEgressCA(rctx, req.EnvdAccessToken, r.Slot, req.Network)
	}
	if initErr != nil {
		<-written
		return nil, fmt.Errorf("envd init at %s: %w", addr, initErr)
	}
	ph.done("init")
	v := h.markClaimed(claimed)
	h.watchExit()
	if err := <-written; err != nil {
		a.log.Warn("persist claimed pool member", "sandbox_id", r.ID, "error", err)
	}
	ph.done("record")
	return v, nil
}

// markClaimed makes h the sandbox of record claimed and returns its view.
func (h *handle) markClaimed(claimed record) *nodeapi.Sandbox {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.rec = claimed
	h.internal = false
	h.lastCPU, h.lastCPUAt = 0, h.a.clock.Now()
	h.armBackstopLocked()
	return h.viewLocked()
}

// claimedRecord is pool member record r once claimed by req with
// resources res, at now: an ordinary sandbox of the create, in a new
// epoch, started now and ending at endAt(req, now).
func claimedRecord(r record, req nodeapi.CreateRequest, res sandbox.Resources, now time.Time) record {
	r.ExecutionID = req.ExecutionID
	if r.ExecutionID == "" {
		r.ExecutionID = sandbox.NewExecutionID()
	}
	r.TeamID = req.TeamID
	r.Template = req.Template
	if res.MemoryMB != r.Resources.MemoryMB && r.GuestMemoryMB == 0 {
		r.GuestMemoryMB = r.Resources.MemoryMB
	}
	r.Resources = res
	r.Network = clonePolicy(req.Network)
	r.EnvVars = maps.Clone(req.EnvVars)
	r.Metadata = maps.Clone(req.Metadata)
	r.AccessToken = req.EnvdAccessToken
	r.Internal = false
	r.Epoch++
	r.StartedAt = now
	r.EndAt = endAt(req, now)
	return r
}

// resize sets the limits of running sandbox id, whose cgroup is cg, to
// res: the cgroup's (as bringUp creates it), then the driver's own above
// them (driver.Resizer). The guest keeps what it read at boot.
func (a *Agent) resize(ctx context.Context, id string, cg cgroup.Cgroup, res sandbox.Resources) error {
	if cg == nil {
		return fmt.Errorf("resize: no cgroup: %w", errdefs.ErrNotFound)
	}
	if err := cg.Update(ctx, res); err != nil {
		return fmt.Errorf("resize cgroup: %w", err)
	}
	if rz, ok := a.drv.(driver.Resizer); ok {
		if err := rz.Resize(ctx, id, res); err != nil {
			return fmt.Errorf("resize in %s: %w", a.drv.Name(), err)
		}
	}
	return nil
}
