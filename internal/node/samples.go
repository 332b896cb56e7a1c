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

// sampleRing is one sandbox's samples. Guarded by Agent.mu.
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
	a.mu.Lock()
	var run []*sbx
	for _, s := range a.sandboxes {
		if !s.gone && !s.internal && s.rec.State == sandbox.StateRunning && !s.checkpointing && s.cg != nil {
			run = append(run, s)
		}
	}
	a.mu.Unlock()
	for _, s := range run {
		a.loadSamples(s)
		a.sampleOne(ctx, s)
	}
}

func (a *Agent) sampleOne(ctx context.Context, s *sbx) {
	a.mu.Lock()
	id, cg, res, epoch := s.rec.ID, s.cg, s.rec.Resources, s.rec.Epoch
	a.mu.Unlock()
	if cg == nil {
		return
	}
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cs, err := cg.Stats(sctx)
	if err != nil {
		a.log.Debug("sample sandbox metrics", "sandbox_id", id, "error", err)
		return
	}
	now := a.clock.Now()
	st := nodeapi.Stats{
		At: now, CPUCount: res.VCPUs, MemoryUsedBytes: cs.MemoryBytes,
		MemoryPeakBytes: cs.MemoryPeakBytes, MemoryTotal: memoryTotal(res, cs),
	}
	if used, total, err := a.cfg.Layers.Usage(sctx, id); err == nil {
		st.DiskUsedBytes, st.DiskTotalBytes = used, total
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if s.gone || s.rec.Epoch != epoch || s.rec.State != sandbox.StateRunning {
		return // paused or killed meanwhile
	}
	r := &s.samples
	if r.epoch == epoch && !r.cpuAt.IsZero() && now.After(r.cpuAt) && cs.CPUUsageNanos >= r.cpu && res.VCPUs > 0 {
		st.CPUUsedPct = 100 * float64(cs.CPUUsageNanos-r.cpu) / float64(now.Sub(r.cpuAt).Nanoseconds()) / float64(res.VCPUs)
	}
	r.cpu, r.cpuAt, r.epoch = cs.CPUUsageNanos, now, epoch
	r.buf = append(r.buf, st)
	r.dirty = true
	a.trimLocked(r, now)
}

// trimLocked drops the samples older than the retention.
func (a *Agent) trimLocked(r *sampleRing, now time.Time) {
	cut := now.Add(-a.cfg.MetricsRetention)
	i := 0
	for i < len(r.buf) && r.buf[i].At.Before(cut) {
		i++
	}
	if i > 0 {
		r.buf = slices.Delete(r.buf, 0, i)
	}
}

// loadSamples reads s's ring from disk once.
func (a *Agent) loadSamples(s *sbx) {
	a.mu.Lock()
	loaded, id := s.samples.loaded, s.rec.ID
	a.mu.Unlock()
	if loaded {
		return
	}
	var disk []nodeapi.Stats
	b, err := os.ReadFile(filepath.Join(sandboxDir(a.cfg.DataDir, id), metricsFile))
	if err == nil {
		if err := json.Unmarshal(b, &disk); err != nil {
			a.log.Warn("unreadable sandbox metrics file; starting afresh", "sandbox_id", id, "error", err)
			disk = nil
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		a.log.Warn("read sandbox metrics file", "sandbox_id", id, "error", err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if s.samples.loaded {
		return
	}
	s.samples.loaded = true
	if len(disk) > 0 {
		s.samples.buf = append(disk, s.samples.buf...)
		a.trimLocked(&s.samples, a.clock.Now())
	}
}

// flushSamples writes the rings with new samples to their state dirs.
func (a *Agent) flushSamples() {
	a.mu.Lock()
	type job struct {
		s   *sbx
		id  string
		buf []nodeapi.Stats
	}
	var jobs []job
	for id, s := range a.sandboxes {
		if s.gone || s.internal || !s.samples.dirty {
			continue
		}
		jobs = append(jobs, job{s, id, slices.Clone(s.samples.buf)})
		s.samples.dirty = false
	}
	a.mu.Unlock()
	for _, j := range jobs {
		if err := a.writeSamples(j.s, j.id, j.buf); err != nil {
			a.log.Warn("write sandbox metrics", "sandbox_id", j.id, "error", err)
		}
	}
}

func (a *Agent) writeSamples(s *sbx, id string, buf []nodeapi.Stats) error {
	b, err := json.Marshal(buf)
	if err != nil {
		return err
	}
	// persistMu orders this write with destroy's removal of the directory.
	s.persistMu.Lock()
	defer s.persistMu.Unlock()
	a.mu.Lock()
	gone := s.gone
	a.mu.Unlock()
	if gone {
		return nil
	}
	dir := sandboxDir(a.cfg.DataDir, id)
	return atomicfile.Write(filepath.Join(dir, metricsFile), b, 0o600)
}

// Metrics implements MetricsSource.
func (a *Agent) Metrics(ctx context.Context, id string, start, end time.Time) ([]nodeapi.Stats, error) {
	s, err := a.lookup(id)
	if err != nil {
		return nil, err
	}
	a.loadSamples(s)
	a.mu.Lock()
	defer a.mu.Unlock()
	if s.gone || s.internal {
		return nil, a.goneErr(id)
	}
	out := []nodeapi.Stats{}
	cut := a.clock.Now().Add(-a.cfg.MetricsRetention)
	for _, st := range s.samples.buf {
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
