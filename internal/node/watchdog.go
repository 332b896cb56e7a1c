package node

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warren-sandbox/warren/internal/driver/oci"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/sandbox"
)

// The watchdog (docs/lifecycle.md §5) probes the envd of every running
// sandbox on a jittered schedule and marks it healthy or unhealthy. Each
// probe carries the sandbox's lifecycle epoch: a result that comes back
// after a pause, resume or kill changed the epoch, or for a sandbox no
// longer tracked, is dropped and records nothing. Paused and pausing
// sandboxes, and running ones whose memory is being checkpointed (frozen),
// are never probed. An accepted probe that carries the guest's used memory
// records it into sandbox_guest_mem_used_bytes{template}, labelled from the
// agent's own record of the sandbox; a probe without the reading records
// nothing. Memory never changes health: the guest's value is
// tenant-controlled, an observation only.

// Defaults of the watchdog's Config fields.
const (
	DefaultWatchdogMin  = 25 * time.Second
	DefaultWatchdogMax  = 40 * time.Second
	DefaultProbeTimeout = 5 * time.Second
	// watchdogTick is how often the watchdog looks for due probes.
	watchdogTick = time.Second
)

// MemUsedHeader is the header of envd's /health answer that carries the
// guest's used memory (MemTotal - MemAvailable) in bytes.
const MemUsedHeader = "X-Warren-Mem-Used"

// EnvdHealth is one answer of envd's /health.
type EnvdHealth struct {
	// MemUsedBytes is the guest's used memory; valid when MemKnown.
	MemUsedBytes uint64
	MemKnown     bool
}

// EnvdProber is the optional part of Envd that the watchdog uses: one
// health probe. An error means unhealthy. Without it the watchdog is off.
type EnvdProber interface {
	Probe(ctx context.Context, addr string) (EnvdHealth, error)
}

var _ EnvdProber = (*HTTPEnvd)(nil)

// Probe implements EnvdProber: one GET /health, healthy on 204.
func (e *HTTPEnvd) Probe(ctx context.Context, addr string) (EnvdHealth, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/health", nil)
	if err != nil {
		return EnvdHealth{}, fmt.Errorf("envd health: %w", err)
	}
	resp, err := e.client.Do(req)
	if err != nil {
		return EnvdHealth{}, fmt.Errorf("envd health: %w: %w", err, errdefs.ErrUnavailable)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		return EnvdHealth{}, fmt.Errorf("envd health: status %s: %w", resp.Status, errdefs.ErrUnavailable)
	}
	var h EnvdHealth
	if v := resp.Header.Get(MemUsedHeader); v != "" {
		if n, err := strconv.ParseUint(v, 10, 64); err == nil {
			h.MemUsedBytes, h.MemKnown = n, true
		}
	}
	return h, nil
}

// watchState is the watchdog's view of one sandbox. Guarded by its
// handle's mu.
type watchState struct {
	// next is when the sandbox is probed next, in epoch nextEpoch.
	next      time.Time
	nextEpoch int64
	probing   bool
	// health was seen in healthEpoch.
	health      nodeapi.Health
	healthEpoch int64
}

// healthLocked is h's health in its current epoch. h.mu is held.
func (h *handle) healthLocked() nodeapi.Health {
	if h.rec.State != sandbox.StateRunning || h.watch.health == "" || h.watch.healthEpoch != h.rec.Epoch {
		return nodeapi.HealthUnknown
	}
	return h.watch.health
}

func (c *Config) watchdogDefaults() error {
	if c.WatchdogMin == 0 {
		c.WatchdogMin = DefaultWatchdogMin
	}
	if c.WatchdogMax == 0 {
		c.WatchdogMax = max(DefaultWatchdogMax, c.WatchdogMin)
	}
	if c.WatchdogMin > 0 && c.WatchdogMax < c.WatchdogMin {
		return fmt.Errorf("node config: watchdog interval %s..%s: %w", c.WatchdogMin, c.WatchdogMax, errdefs.ErrInvalid)
	}
	if c.ProbeTimeout == 0 {
		c.ProbeTimeout = DefaultProbeTimeout
	}
	if c.ProbeTimeout < 0 {
		return fmt.Errorf("node config: probe timeout %s: %w", c.ProbeTimeout, errdefs.ErrInvalid)
	}
	return nil
}

// watchdogMetrics are the watchdog's series.
type watchdogMetrics struct {
	guestMem *prometheus.HistogramVec
	probes   *prometheus.CounterVec
}

func (a *Agent) initWatchdogMetrics() {
	a.wd = watchdogMetrics{
		guestMem: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sandbox_guest_mem_used_bytes",
			Help:    "Guest memory in use (MemTotal - MemAvailable) reported by envd's health answer to accepted watchdog probes, by template. Tenant-controlled: an observation only.",
			Buckets: prometheus.ExponentialBuckets(16<<20, 2, 12), // 16 MiB .. 32 GiB
		}, []string{"template"}),
		probes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandbox_watchdog_probes_total",
			Help: "Watchdog health probes of sandboxes' envd by result (healthy, unhealthy, or stale: dropped because the sandbox changed epoch or left meanwhile).",
		}, []string{"result"}),
	}
	for _, r := range []string{"healthy", "unhealthy", "stale"} {
		a.wd.probes.WithLabelValues(r)
	}
}

func (a *Agent) watchdogCollectors() []prometheus.Collector {
	return []prometheus.Collector{a.wd.guestMem, a.wd.probes, &agentCollector{a: a}}
}

// startWatchdog starts the probe loop when it is enabled and the envd
// client can probe.
func (a *Agent) startWatchdog() {
	if a.cfg.WatchdogMin < 0 {
		a.log.Info("watchdog disabled by configuration")
		return
	}
	p, ok := a.cfg.Envd.(EnvdProber)
	if !ok {
		a.log.Info("watchdog disabled: the envd client cannot probe health")
		return
	}
	a.wg.Go(func() { a.watchdogLoop(p) })
}

// sleep waits d on the agent's clock; false when the agent closes.
func (a *Agent) sleep(d time.Duration) bool {
	ch := make(chan struct{})
	t := a.clock.AfterFunc(d, func() { close(ch) })
	select {
	case <-a.ctx.Done():
		t.Stop()
		return false
	case <-ch:
		return true
	}
}

func (a *Agent) jitter() time.Duration {
	lo, hi := a.cfg.WatchdogMin, a.cfg.WatchdogMax
	if hi <= lo {
		return lo
	}
	return lo + rand.N(hi-lo+1)
}

// probeJob is one probe to make.
type probeJob struct {
	h     *handle
	addr  string
	epoch int64
}

func (a *Agent) watchdogLoop(p EnvdProber) {
	for a.sleep(watchdogTick) {
		now := a.clock.Now()
		var due []probeJob
		for _, h := range a.handles() {
			if j, ok := h.probeDue(now); ok {
				due = append(due, j)
			}
		}
		for _, j := range due {
			a.wg.Go(func() { a.probe(p, j) })
		}
	}
}

// probeDue says whether h is due for a probe at now, and marks it probing
// when it is.
func (h *handle) probeDue(now time.Time) (probeJob, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	w := &h.watch
	if h.gone || h.internal || h.rec.State != sandbox.StateRunning || h.checkpointing || h.rec.Slot == nil {
		// Not probed; a later start is probed after a full interval.
		w.next = time.Time{}
		return probeJob{}, false
	}
	if w.next.IsZero() || w.nextEpoch != h.rec.Epoch {
		w.next, w.nextEpoch = now.Add(h.a.jitter()), h.rec.Epoch
		return probeJob{}, false
	}
	if w.probing || now.Before(w.next) {
		return probeJob{}, false
	}
	w.probing = true
	w.next = now.Add(h.a.jitter())
	return probeJob{h: h, addr: h.a.envdAddr(h.rec.Slot), epoch: h.rec.Epoch}, true
}

// MaxInitOutput bounds the file that keeps a sandbox's init output on the
// host (its bundle's runtime.log), checked at each watchdog probe.
const MaxInitOutput = 1 << 20

// probe probes one sandbox and applies the result if the sandbox is still
// in the probe's epoch.
func (a *Agent) probe(p EnvdProber, j probeJob) {
	id := j.h.id
	ctx, cancel := context.WithTimeout(a.ctx, a.cfg.ProbeTimeout)
	hl, err := p.Probe(ctx, j.addr)
	cancel()
	// What the sandbox's init writes is kept on the host: bound it.
	if cut, cerr := oci.CapLog(filepath.Join(sandboxDir(a.cfg.DataDir, id), "bundle"), MaxInitOutput); cerr != nil {
		a.log.Warn("watchdog: cap init output", "sandbox_id", id, "error", cerr)
	} else if cut {
		a.log.Info("watchdog: init output over its cap, older output dropped", "sandbox_id", id, "cap_bytes", MaxInitOutput)
	}
	j.h.probed(j.epoch, hl, err, a.isClosed())
}

// probed records the result of h's probe of epoch: its health, unless
// the agent closed or h moved on meanwhile (a stale result).
func (h *handle) probed(epoch int64, hl EnvdHealth, err error, closed bool) {
	a := h.a
	h.mu.Lock()
	defer h.mu.Unlock()
	h.watch.probing = false
	if closed {
		return
	}
	if h.gone || h.rec.Epoch != epoch || h.rec.State != sandbox.StateRunning || h.checkpointing {
		a.wd.probes.WithLabelValues("stale").Inc()
		a.log.Debug("watchdog: probe result of an old epoch dropped", "sandbox_id", h.id, "probe_epoch", epoch)
		return
	}
	prev := h.healthLocked()
	next := nodeapi.HealthHealthy
	if err != nil {
		next = nodeapi.HealthUnhealthy
	}
	h.watch.health, h.watch.healthEpoch = next, epoch
	a.wd.probes.WithLabelValues(string(next)).Inc()
	if err == nil && hl.MemKnown {
		a.wd.guestMem.WithLabelValues(templateLabel(h.rec.Template.ID)).Observe(float64(hl.MemUsedBytes))
	}
	switch {
	case next == nodeapi.HealthUnhealthy && prev != nodeapi.HealthUnhealthy:
		a.log.Warn("watchdog: sandbox unhealthy", "sandbox_id", h.id, "execution_id", h.rec.ExecutionID, "error", err)
	case next == nodeapi.HealthHealthy && prev == nodeapi.HealthUnhealthy:
		a.log.Info("watchdog: sandbox healthy again", "sandbox_id", h.id, "execution_id", h.rec.ExecutionID)
	}
}

func templateLabel(id string) string {
	if id == "" {
		return "unknown"
	}
	return id
}

// agentCollector reports gauges computed from the agent's sandboxes at
// scrape time: sandboxes by state, running sandboxes by health, and the
// resources given to running sandboxes.
type agentCollector struct{ a *Agent }

var (
	descSandboxes = prometheus.NewDesc("node_sandboxes", "Sandboxes on this node by lifecycle state.", []string{"state"}, nil)
	descHealth    = prometheus.NewDesc("node_sandbox_health", "Running sandboxes on this node by watchdog health.", []string{"health"}, nil)
	descVCPUs     = prometheus.NewDesc("node_sandbox_vcpus", "vCPUs given to the running sandboxes of this node.", nil, nil)
	descMem       = prometheus.NewDesc("node_sandbox_memory_bytes", "Memory limit of the running sandboxes of this node, summed.", nil, nil)
	descDisk      = prometheus.NewDesc("node_sandbox_disk_bytes", "Writable layer size of the sandboxes (running and paused) of this node, summed.", nil, nil)
	descKept      = prometheus.NewDesc("node_paused_sandboxes_kept", "Paused sandboxes of this node that keep their network slot, cgroup, mount and a runtime container prepared for their resume (each holds about 15 MB of memory under runsc).", nil, nil)
)

var _ prometheus.Collector = (*agentCollector)(nil)

func (c *agentCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descSandboxes, descHealth, descVCPUs, descMem, descDisk, descKept} {
		ch <- d
	}
}

func (c *agentCollector) Collect(ch chan<- prometheus.Metric) {
	states := map[sandbox.State]int{sandbox.StateStarting: 0, sandbox.StateRunning: 0, sandbox.StatePausing: 0, sandbox.StatePaused: 0}
	health := map[nodeapi.Health]int{nodeapi.HealthHealthy: 0, nodeapi.HealthUnhealthy: 0, nodeapi.HealthUnknown: 0}
	var vcpus, mem, disk, kept float64
	for _, h := range c.a.handles() {
		g, ok := h.census()
		if !ok {
			continue
		}
		if g.kept {
			kept++
		}
		states[g.rec.State]++
		disk += float64(g.rec.Resources.DiskMB) * (1 << 20)
		if g.rec.State == sandbox.StateRunning {
			health[g.health]++
			vcpus += float64(g.rec.Resources.VCPUs)
			mem += float64(g.rec.Resources.MemoryMB) * (1 << 20)
		}
	}
	for st, n := range states {
		ch <- prometheus.MustNewConstMetric(descSandboxes, prometheus.GaugeValue, float64(n), string(st))
	}
	for h, n := range health {
		ch <- prometheus.MustNewConstMetric(descHealth, prometheus.GaugeValue, float64(n), string(h))
	}
	ch <- prometheus.MustNewConstMetric(descVCPUs, prometheus.GaugeValue, vcpus)
	ch <- prometheus.MustNewConstMetric(descMem, prometheus.GaugeValue, mem)
	ch <- prometheus.MustNewConstMetric(descDisk, prometheus.GaugeValue, disk)
	ch <- prometheus.MustNewConstMetric(descKept, prometheus.GaugeValue, kept)
}

// censusEntry is what agentCollector counts of one sandbox.
type censusEntry struct {
	rec    record
	health nodeapi.Health
	kept   bool
}

// census is h's entry in the node's gauges; false for the agent's own
// sandboxes and gone ones.
func (h *handle) census() (censusEntry, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.internal || h.gone {
		return censusEntry{}, false
	}
	return censusEntry{rec: h.rec, health: h.healthLocked(), kept: h.kept != nil}, true
}
