package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/warren-sandbox/warren/internal/atomicfile"
	"github.com/warren-sandbox/warren/internal/cgroup"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/sandbox"
)

// Per-sandbox metrics (the SDK's getMetrics): every Config.MetricsInterval
// the agent samples each running sandbox's CPU, memory (from its cgroup)
// and disk (from its writable layer) into a ring kept for
// Config.MetricsRetention. The ring lives with the sandbox on this node:
// it is kept while the sandbox is paused, written to
// sandboxes/sbx-<id>/metrics.json every minute and when the agent closes
// (so an agent restart keeps it, losing at most the last minute after a
// crash), and deleted with the sandbox when it is killed.

// Defaults of the sampler's Config fields.
const (
	DefaultMetricsInterval  = 5 * time.Second
	DefaultMetricsRetention = time.Hour
	metricsFile             = "metrics.json"
	// samplesFlushEvery is how many sampling rounds pass between writes
	// of the rings to disk.
	samplesFlushEvery = 12
)

var _ nodeapi.MetricsSource = (*Agent)(nil)

// sampleRing is one sandbox's samples. Guarded by its handle's mu.
type sampleRing struct {
	buf    []nodeapi.Stats
	loaded bool // buf holds what was on disk
	dirty  bool // buf has samples not on disk
	cpu    uint64
	cpuAt  time.Time
	epoch  int64 // cpu is from this epoch's cgroup
}

func (c *Config) samplesDefaults() error {
	if c.MetricsInterval == 0 {
		c.MetricsInterval = DefaultMetricsInterval
	}
	if c.MetricsRetention == 0 {
		c.MetricsRetention = DefaultMetricsRetention
	}
	if c.MetricsRetention < 0 {
		return fmt.Errorf("node config: metrics retention %s: %w", c.MetricsRetention, errdefs.ErrInvalid)
	}
	return nil
}

func (a *Agent) startSampler() {
	if a.cfg.MetricsInterval < 0 {
		return
	}
	a.wg.Go(a.samplerLoop)
}

func (a *Agent) samplerLoop() {
	for round := 1; a.sleep(a.cfg.MetricsInterval); round++ {
		a.sampleAll(a.ctx)
		if round%samplesFlushEvery == 0 {
			a.flushSamples()
		}
	}
}

// sampleAll takes one sample of every running sandbox.
func (a *Agent) sampleAll(ctx context.Context) {
	var run []*handle
	for _, h := range a.handles() {
		if st := h.get(); !st.gone && !st.internal && st.rec.State == sandbox.StateRunning && !st.checkpointing && st.cg != nil {
			run = append(run, h)
		}
	}
	for _, h := range run {
		h.loadSamples()
		h.sampleOne(ctx)
	}
}

func (h *handle) sampleOne(ctx context.Context) {
	a := h.a
	st := h.get()
	cg, res, epoch := st.cg, st.rec.Resources, st.rec.Epoch
	if cg == nil {
		return
	}
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cs, err := cg.Stats(sctx)
	if err != nil {
		a.log.Debug("sample sandbox metrics", "sandbox_id", h.id, "error", err)
		return
	}
	now := a.clock.Now()
	sample := nodeapi.Stats{
		At: now, CPUCount: res.VCPUs, MemoryUsedBytes: cs.MemoryBytes,
		MemoryPeakBytes: cs.MemoryPeakBytes, MemoryTotal: memoryTotal(res, cs),
	}
	if used, total, err := a.cfg.Layers.Usage(sctx, h.id); err == nil {
		sample.DiskUsedBytes, sample.DiskTotalBytes = used, total
	}
	h.addSample(sample, cs.CPUUsageNanos, epoch)
}

// addSample keeps sample, taken in epoch with the cumulative CPU use cpu,
// unless h paused or ended meanwhile.
func (h *handle) addSample(sample nodeapi.Stats, cpu uint64, epoch int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.gone || h.rec.Epoch != epoch || h.rec.State != sandbox.StateRunning {
		return // paused or killed meanwhile
	}
	r := &h.samples
	now, vcpus := sample.At, sample.CPUCount
	if r.epoch == epoch && !r.cpuAt.IsZero() && now.After(r.cpuAt) && cpu >= r.cpu && vcpus > 0 {
		sample.CPUUsedPct = 100 * float64(cpu-r.cpu) / float64(now.Sub(r.cpuAt).Nanoseconds()) / float64(vcpus)
	}
	r.cpu, r.cpuAt, r.epoch = cpu, now, epoch
	r.buf = append(r.buf, sample)
	r.dirty = true
	r.trim(now.Add(-h.a.cfg.MetricsRetention))
}

// trim drops the samples of r taken before cut.
func (r *sampleRing) trim(cut time.Time) {
	i := 0
	for i < len(r.buf) && r.buf[i].At.Before(cut) {
		i++
	}
	if i > 0 {
		r.buf = slices.Delete(r.buf, 0, i)
	}
}

// loadSamples reads h's ring from disk once.
func (h *handle) loadSamples() {
	a := h.a
	if h.samplesLoaded() {
		return
	}
	var disk []nodeapi.Stats
	b, err := os.ReadFile(filepath.Join(sandboxDir(a.cfg.DataDir, h.id), metricsFile))
	if err == nil {
		if err := json.Unmarshal(b, &disk); err != nil {
			a.log.Warn("unreadable sandbox metrics file; starting afresh", "sandbox_id", h.id, "error", err)
			disk = nil
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		a.log.Warn("read sandbox metrics file", "sandbox_id", h.id, "error", err)
	}
	h.mergeSamples(disk)
}

func (h *handle) samplesLoaded() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.samples.loaded
}

// mergeSamples puts the samples read from disk before those taken since,
// unless another reader did first.
func (h *handle) mergeSamples(disk []nodeapi.Stats) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.samples.loaded {
		return
	}
	h.samples.loaded = true
	if len(disk) > 0 {
		h.samples.buf = append(disk, h.samples.buf...)
		h.samples.trim(h.a.clock.Now().Add(-h.a.cfg.MetricsRetention))
	}
}

// flushSamples writes the rings with new samples to their state dirs.
func (a *Agent) flushSamples() {
	for _, h := range a.handles() {
		buf, ok := h.takeDirtySamples()
		if !ok {
			continue
		}
		if err := h.writeSamples(buf); err != nil {
			a.log.Warn("write sandbox metrics", "sandbox_id", h.id, "error", err)
		}
	}
}

// takeDirtySamples returns h's ring when it has samples not on disk, and
// counts them written.
func (h *handle) takeDirtySamples() ([]nodeapi.Stats, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.gone || h.internal || !h.samples.dirty {
		return nil, false
	}
	h.samples.dirty = false
	return slices.Clone(h.samples.buf), true
}

func (h *handle) writeSamples(buf []nodeapi.Stats) error {
	b, err := json.Marshal(buf)
	if err != nil {
		return err
	}
	// files orders this write with destroy's removal of the directory.
	h.files.Lock()
	defer h.files.Unlock()
	if h.isGone() {
		return nil
	}
	return atomicfile.Write(filepath.Join(sandboxDir(h.a.cfg.DataDir, h.id), metricsFile), b, 0o600)
}

// Metrics implements MetricsSource.
func (a *Agent) Metrics(ctx context.Context, id string, start, end time.Time) ([]nodeapi.Stats, error) {
	h, err := a.lookup(id)
	if err != nil {
		return nil, err
	}
	h.loadSamples()
	return h.samplesIn(start, end)
}

// samplesIn returns h's samples between start and end (zero: open).
func (h *handle) samplesIn(start, end time.Time) ([]nodeapi.Stats, error) {
	a := h.a
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.gone || h.internal {
		return nil, a.goneErr(h.id)
	}
	out := []nodeapi.Stats{}
	cut := a.clock.Now().Add(-a.cfg.MetricsRetention)
	for _, st := range h.samples.buf {
		if st.At.Before(cut) || (!start.IsZero() && st.At.Before(start)) || (!end.IsZero() && st.At.After(end)) {
			continue
		}
		out = append(out, st)
	}
	return out, nil
}

// memoryTotal is the memory a sandbox's guest has: its requested size
// (the host cgroup's limit may be higher: the runtime's own overhead sits
// above the guest's memory), else the cgroup's limit.
func memoryTotal(res sandbox.Resources, cs cgroup.Stats) uint64 {
	if res.MemoryMB > 0 {
		return uint64(res.MemoryMB) << 20
	}
	return cs.MemoryLimit
}
