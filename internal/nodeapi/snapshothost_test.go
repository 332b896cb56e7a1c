package nodeapi_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/nodeapi"
)

// TestParseCPUFlags: the flags every processor of a /proc/cpuinfo lists,
// sorted, without repeats.
func TestParseCPUFlags(t *testing.T) {
	info := "processor\t: 0\nflags\t\t: sse4_2 fpu avx2 fpu\nbugs\t\t: spectre_v1\n\nprocessor\t: 1\nflags\t\t: fpu avx2 sse4_2 avx512f\n"
	if got := nodeapi.ParseCPUFlags(info); !slices.Equal(got, []string{"avx2", "fpu", "sse4_2"}) {
		t.Fatalf("ParseCPUFlags = %v", got)
	}
	if got := nodeapi.ParseCPUFlags("processor\t: 0\n"); len(got) != 0 {
		t.Fatalf("no flags line: %v", got)
	}
}

// TestRestorableOn: a snapshot restores where the runtime and the
// sandbox's shape are the same and every CPU flag it was taken with is
// there (more are fine); otherwise the error says what differs.
func TestRestorableOn(t *testing.T) {
	src := nodeapi.SnapshotHost{Runtime: "runsc sha256:ab platform systrap", Envd: "sha256:ef", CPUFlags: []string{"avx2", "fpu"}, VCPUs: 2, MemoryMB: 512, TmpMB: 256, DiskMB: 1024}
	more := src
	more.CPUFlags = []string{"avx2", "avx512f", "fpu"}
	if err := src.RestorableOn(more); err != nil {
		t.Fatalf("onto a superset of flags: %v", err)
	}
	for name, c := range map[string]struct {
		change func(*nodeapi.SnapshotHost)
		says   string
	}{
		"flag missing":  {func(h *nodeapi.SnapshotHost) { h.CPUFlags = []string{"fpu"} }, "avx2"},
		"other runtime": {func(h *nodeapi.SnapshotHost) { h.Runtime = "runsc sha256:cd platform systrap" }, "runtime"},
		"platform":      {func(h *nodeapi.SnapshotHost) { h.Runtime = "runsc sha256:ab platform kvm" }, "runtime"},
		"other envd":    {func(h *nodeapi.SnapshotHost) { h.Envd = "sha256:01" }, "envd"},
		"memory":        {func(h *nodeapi.SnapshotHost) { h.MemoryMB = 1024 }, "memory"},
		"tmp":           {func(h *nodeapi.SnapshotHost) { h.TmpMB = 128 }, "/tmp"},
		"disk":          {func(h *nodeapi.SnapshotHost) { h.DiskMB = 2048 }, "disk"},
		"vcpus":         {func(h *nodeapi.SnapshotHost) { h.VCPUs = 4 }, "vCPUs"},
	} {
		target := src
		target.CPUFlags = slices.Clone(src.CPUFlags)
		c.change(&target)
		err := src.RestorableOn(target)
		if !errdefs.IsUnsupported(err) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: err = %v, want unsupported saying %q", name, err, c.says)
		}
	}
	var empty nodeapi.SnapshotHost
	if err := empty.RestorableOn(empty); !errdefs.IsUnsupported(err) {
		t.Errorf("a snapshot that recorded nothing: err = %v, want unsupported", err)
	}
}
