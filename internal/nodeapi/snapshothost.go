package nodeapi

import (
	"fmt"
	"slices"
	"strings"

	"github.com/warren-sandbox/warren/internal/errdefs"
)

// Files of a template snapshot's directory besides the runtime's memory
// image: SnapshotMetaFile describes it (the node agent's own record),
// SnapshotLayerTar, in a snapshot that can travel to another node, holds
// its saved writable layer's changes as an OCI layer tar (applied there
// over the node's copy of the template's root filesystem).
const (
	SnapshotMetaFile = "warren-snapshot.json"
	SnapshotLayerTar = "layer.tar"
)

// SnapshotHost is what a memory snapshot was taken with that a restore
// must have too (docs/node.md, "Snapshots on ready"): the runtime build
// and platform that wrote the image, the envd it ran, the host CPU's feature flags the
// guest could use, and the shape of the sandbox it saw (its vCPUs,
// memory, /tmp, which is sized from the memory, and writable layer).
type SnapshotHost struct {
	// Runtime names the runtime's build and platform (for runsc its
	// binary's sha256 and --platform).
	Runtime string `json:"runtime"`
	// Envd is the sha256 of the envd binary the sandbox ran (its process
	// is in the image, its file mapped from the host).
	Envd string `json:"envd"`
	// CPUFlags are the flags of /proc/cpuinfo, sorted.
	CPUFlags []string `json:"cpuFlags"`
	VCPUs    int      `json:"vcpus"`
	MemoryMB int64    `json:"memoryMB"`
	TmpMB    int64    `json:"tmpMB"`
	DiskMB   int64    `json:"diskMB"`
}

// TmpMB is the size of the /tmp of a guest booted with memoryMB (half of
// it; 0: unsized), as the drivers mount it.
func TmpMB(memoryMB int64) int64 {
	if memoryMB <= 0 {
		return 0
	}
	return max(memoryMB/2, 1)
}

// RestorableOn tells whether a snapshot taken on h can be restored on
// target: the same runtime and sandbox shape, and every CPU flag h had.
// The error (errdefs.ErrUnsupported) says what differs.
func (h SnapshotHost) RestorableOn(target SnapshotHost) error {
	var diffs []string
	if h.Runtime == "" || h.Runtime != target.Runtime {
		diffs = append(diffs, fmt.Sprintf("runtime %q, here %q", h.Runtime, target.Runtime))
	}
	if h.Envd == "" || h.Envd != target.Envd {
		diffs = append(diffs, fmt.Sprintf("envd %q, here %q", h.Envd, target.Envd))
	}
	if h.VCPUs != target.VCPUs || h.MemoryMB != target.MemoryMB || h.TmpMB != target.TmpMB || h.DiskMB != target.DiskMB {
		diffs = append(diffs, fmt.Sprintf("sandbox of %d vCPUs, %d MiB memory, %d MiB /tmp, %d MiB disk, here %d, %d, %d, %d",
			h.VCPUs, h.MemoryMB, h.TmpMB, h.DiskMB, target.VCPUs, target.MemoryMB, target.TmpMB, target.DiskMB))
	}
	if len(h.CPUFlags) == 0 {
		diffs = append(diffs, "no CPU flags recorded")
	}
	var missing []string
	for _, f := range h.CPUFlags {
		if _, ok := slices.BinarySearch(target.CPUFlags, f); !ok {
			missing = append(missing, f)
		}
	}
	if len(missing) > 0 {
		diffs = append(diffs, "CPU flags missing here: "+strings.Join(missing, " "))
	}
	if len(diffs) > 0 {
		return fmt.Errorf("snapshot taken with %s: %w", strings.Join(diffs, "; "), errdefs.ErrUnsupported)
	}
	return nil
}

// Equal reports whether h and o describe the same host.
func (h SnapshotHost) Equal(o SnapshotHost) bool {
	return h.Runtime == o.Runtime && h.Envd == o.Envd && slices.Equal(h.CPUFlags, o.CPUFlags) && h.VCPUs == o.VCPUs &&
		h.MemoryMB == o.MemoryMB && h.TmpMB == o.TmpMB && h.DiskMB == o.DiskMB
}

// ParseCPUFlags returns the feature flags of a /proc/cpuinfo, sorted: the
// flags every processor it lists has (a guest may run on any of them).
func ParseCPUFlags(cpuinfo string) []string {
	var common []string
	first := true
	for line := range strings.Lines(cpuinfo) {
		k, v, ok := strings.Cut(line, ":")
		if !ok || strings.TrimSpace(k) != "flags" {
			continue
		}
		fs := strings.Fields(v)
		slices.Sort(fs)
		fs = slices.Compact(fs)
		if first {
			common, first = fs, false
			continue
		}
		common = slices.DeleteFunc(common, func(f string) bool { _, ok := slices.BinarySearch(fs, f); return !ok })
	}
	return common
}
