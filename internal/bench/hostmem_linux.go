package bench

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/warren-sandbox/warren/internal/errdefs"
)

// memAvailable returns the host's MemAvailable in MiB.
func memAvailable() (float64, error) {
	return meminfoField("MemAvailable")
}

// memTotal returns the host's MemTotal in MiB.
func memTotal() (float64, error) {
	return meminfoField("MemTotal")
}

func meminfoField(name string) (float64, error) {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, fmt.Errorf("meminfo: %w", err)
	}
	return parseMeminfo(data, name)
}

// parseMeminfo returns field name of /proc/meminfo content in MiB.
func parseMeminfo(data []byte, name string) (float64, error) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || k != name {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			break
		}
		kb, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return 0, fmt.Errorf("meminfo %s %q: %w", name, v, errdefs.ErrInvalid)
		}
		return kb / 1024, nil
	}
	return 0, fmt.Errorf("meminfo: no %s: %w", name, errdefs.ErrNotFound)
}

// cgroupMemory returns the memory usage in MiB of the cgroup root (v2
// memory.current, else v1 memory.usage_in_bytes).
func cgroupMemory(root string) (float64, error) {
	if root == "" {
		return 0, fmt.Errorf("cgroup memory: no cgroup root: %w", errdefs.ErrInvalid)
	}
	for _, p := range []string{
		filepath.Join("/sys/fs/cgroup", root, "memory.current"),
		filepath.Join("/sys/fs/cgroup/unified", root, "memory.current"),
		filepath.Join("/sys/fs/cgroup/memory", root, "memory.usage_in_bytes"),
	} {
		data, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		b, err := strconv.ParseFloat(strings.TrimSpace(string(data)), 64)
		if err != nil {
			return 0, fmt.Errorf("cgroup memory %s: %w", p, errdefs.ErrInvalid)
		}
		return b / (1 << 20), nil
	}
	return 0, fmt.Errorf("cgroup memory of %q: %w", root, errdefs.ErrNotFound)
}

// loadAvg returns the first three fields of /proc/loadavg.
func loadAvg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}
