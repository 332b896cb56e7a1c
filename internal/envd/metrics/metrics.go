// Package metrics samples the guest's resource usage for envd's /metrics
// route (and the used memory that /health reports): CPU from /proc/stat,
// memory from /proc/meminfo (used = MemTotal - MemAvailable), disk from
// statfs of the root filesystem.
package metrics

import (
	"bufio"
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Metrics is the JSON body of GET /metrics.
type Metrics struct {
	Ts          int64   `json:"ts"`
	CPUCount    int     `json:"cpu_count"`
	CPUUsedPct  float32 `json:"cpu_used_pct"`
	MemTotal    uint64  `json:"mem_total"`
	MemUsed     uint64  `json:"mem_used"`
	MemCache    uint64  `json:"mem_cache"`
	MemTotalMiB uint64  `json:"mem_total_mib"`
	MemUsedMiB  uint64  `json:"mem_used_mib"`
	DiskUsed    uint64  `json:"disk_used"`
	DiskTotal   uint64  `json:"disk_total"`
}

// Sampler reads the metrics. CPU usage is measured between consecutive
// samples; the first sample measures over a short window.
type Sampler struct {
	ProcRoot string // "/proc" unless testing
	DiskPath string // "/" unless testing
	Window   time.Duration

	mu   sync.Mutex
	last *cpuTimes
}

// NewSampler returns a Sampler of the real system.
func NewSampler() *Sampler {
	return &Sampler{ProcRoot: "/proc", DiskPath: "/", Window: 100 * time.Millisecond}
}

type cpuTimes struct{ idle, total uint64 }

// Sample reads every metric.
func (s *Sampler) Sample() (Metrics, error) {
	m := Metrics{Ts: time.Now().Unix(), CPUCount: runtime.NumCPU()}
	mem, err := ReadMemInfo(s.ProcRoot)
	if err != nil {
		return m, err
	}
	m.MemTotal, m.MemUsed, m.MemCache = mem.Total, mem.Used(), mem.Cached
	m.MemTotalMiB, m.MemUsedMiB = m.MemTotal>>20, m.MemUsed>>20
	var st unix.Statfs_t
	if err := unix.Statfs(s.DiskPath, &st); err == nil {
		m.DiskTotal = st.Blocks * uint64(st.Bsize)
		m.DiskUsed = (st.Blocks - st.Bfree) * uint64(st.Bsize)
	}
	pct, err := s.cpuPercent()
	if err != nil {
		return m, err
	}
	m.CPUUsedPct = pct
	return m, nil
}

func (s *Sampler) cpuPercent() (float32, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	prev := s.last
	if prev == nil {
		t, err := readCPU(s.ProcRoot)
		if err != nil {
			return 0, err
		}
		prev = &t
		time.Sleep(s.Window)
	}
	cur, err := readCPU(s.ProcRoot)
	if err != nil {
		return 0, err
	}
	s.last = &cur
	total := cur.total - prev.total
	if total == 0 || cur.total < prev.total {
		return 0, nil
	}
	busy := float64(total-(cur.idle-prev.idle)) / float64(total) * 100
	return float32(math.Round(busy*100) / 100), nil
}

func readCPU(procRoot string) (cpuTimes, error) {
	b, err := os.ReadFile(filepath.Join(procRoot, "stat"))
	if err != nil {
		return cpuTimes{}, fmt.Errorf("read cpu stats: %w", err)
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) < 5 || f[0] != "cpu" {
		return cpuTimes{}, fmt.Errorf("read cpu stats: unexpected %q", line)
	}
	var t cpuTimes
	for i, v := range f[1:] {
		n, _ := strconv.ParseUint(v, 10, 64)
		if i == 7 || i == 8 { // guest time is already in user time
			continue
		}
		t.total += n
		if i == 3 || i == 4 { // idle, iowait
			t.idle += n
		}
	}
	return t, nil
}

// MemInfo holds the /proc/meminfo fields envd reports, in bytes.
type MemInfo struct{ Total, Available, Cached uint64 }

// Used is MemTotal - MemAvailable.
func (m MemInfo) Used() uint64 {
	if m.Available > m.Total {
		return 0
	}
	return m.Total - m.Available
}

// ReadMemInfo parses <procRoot>/meminfo.
func ReadMemInfo(procRoot string) (MemInfo, error) {
	f, err := os.Open(filepath.Join(procRoot, "meminfo"))
	if err != nil {
		return MemInfo{}, fmt.Errorf("read meminfo: %w", err)
	}
	defer f.Close()
	var m MemInfo
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		fields := strings.Fields(v)
		if len(fields) == 0 {
			continue
		}
		n, err := strconv.ParseUint(fields[0], 10, 64)
		if err != nil {
			continue
		}
		if len(fields) > 1 && fields[1] == "kB" {
			n *= 1024
		}
		switch k {
		case "MemTotal":
			m.Total = n
		case "MemAvailable":
			m.Available = n
		case "Cached":
			m.Cached = n
		}
	}
	if m.Total == 0 {
		return m, fmt.Errorf("read meminfo: no MemTotal")
	}
	return m, sc.Err()
}
