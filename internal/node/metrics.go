package node

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/nodeapi"
)

// opDurations is sandbox_operation_duration_seconds{op,result}: how long
// the node's create, pause, resume and fork took (result ok or error).
func newOpDurations() *prometheus.HistogramVec {
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "sandbox_operation_duration_seconds",
		Help:    "Duration of the node's sandbox operations (create, pause, resume, fork) by result.",
		Buckets: prometheus.ExponentialBuckets(0.005, 2, 14), // 5 ms .. 41 s
	}, []string{"op", "result"})
	for _, op := range []string{"create", "pause", "resume", "fork"} {
		for _, r := range []string{"ok", "error"} {
			h.WithLabelValues(op, r)
		}
	}
	return h
}

func (a *Agent) observeOp(op string, start time.Time, err error) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	a.opDur.WithLabelValues(op, result).Observe(a.clock.Now().Sub(start).Seconds())
}

// Pause implements Service.
func (a *Agent) Pause(ctx context.Context, id string, req nodeapi.PauseRequest) (*nodeapi.Sandbox, error) {
	start := a.clock.Now()
	h, err := a.lookup(id)
	var v *nodeapi.Sandbox
	if err == nil {
		v, err = h.pause(ctx, req)
	}
	a.observeOp("pause", start, err)
	return v, err
}

// Resume implements Service.
func (a *Agent) Resume(ctx context.Context, id string, req nodeapi.ResumeRequest) (*nodeapi.Sandbox, error) {
	start := a.clock.Now()
	h, err := a.lookup(id)
	var v *nodeapi.Sandbox
	if err == nil {
		v, err = h.resume(ctx, req)
	}
	a.observeOp("resume", start, err)
	return v, err
}

// Fork implements Service.
func (a *Agent) Fork(ctx context.Context, id string, req nodeapi.ForkRequest) ([]*nodeapi.Sandbox, error) {
	start := a.clock.Now()
	h, err := a.lookup(id)
	var v []*nodeapi.Sandbox
	if err == nil {
		v, err = h.fork(ctx, req)
	}
	a.observeOp("fork", start, err)
	return v, err
}

var (
	descCapCPUs = prometheus.NewDesc("node_capacity_cpus", "CPUs of this node.", nil, nil)
	descCapMem  = prometheus.NewDesc("node_capacity_memory_bytes", "Memory of this node (MemTotal).", nil, nil)
	descFree    = prometheus.NewDesc("node_disk_free_bytes", "Free bytes of the file system holding the node's data directory.", nil, nil)
)

// capacityCollector reports the node's capacity at scrape time; its use is
// in agentCollector (node_sandbox_vcpus, node_sandbox_memory_bytes,
// node_sandbox_disk_bytes).
type capacityCollector struct{ a *Agent }

var _ prometheus.Collector = (*capacityCollector)(nil)

func (c *capacityCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descCapCPUs
	ch <- descCapMem
	ch <- descFree
}

func (c *capacityCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(descCapCPUs, prometheus.GaugeValue, float64(runtime.NumCPU()))
	if m, ok := memTotal(); ok {
		ch <- prometheus.MustNewConstMetric(descCapMem, prometheus.GaugeValue, float64(m))
	}
	if free, err := c.a.cfg.FreeDisk(c.a.cfg.DataDir); err == nil {
		ch <- prometheus.MustNewConstMetric(descFree, prometheus.GaugeValue, float64(free))
	}
}

// memTotal reads MemTotal from /proc/meminfo.
func memTotal() (uint64, bool) { return meminfo("MemTotal:") }

// memAvailable reads MemAvailable from /proc/meminfo.
func memAvailable() (uint64, error) {
	n, ok := meminfo("MemAvailable:")
	if !ok {
		return 0, fmt.Errorf("/proc/meminfo: no MemAvailable: %w", errdefs.ErrUnavailable)
	}
	return n, nil
}

// meminfo reads the field key (with its colon) of /proc/meminfo in bytes.
func meminfo(key string) (uint64, bool) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, false
	}
	for l := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(l, key); ok {
			f := strings.Fields(rest)
			if len(f) == 0 {
				return 0, false
			}
			n, err := strconv.ParseUint(f[0], 10, 64)
			return n << 10, err == nil
		}
	}
	return 0, false
}
