package runsc

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/warren-sandbox/warren/internal/driver/oci"
	"github.com/warren-sandbox/warren/internal/testenv"
)

// TestHostMemoryWall: the wall holds the guest, the overhead and the
// reserve, in whole thousands of pages (a stub's OOM bonus is then the
// whole limit).
func TestHostMemoryWall(t *testing.T) {
	t.Parallel()
	page := int64(os.Getpagesize())
	for _, c := range []struct{ guest, reserve int64 }{{512, 0}, {512, OOMReserveMB}, {1024, 0}, {1, 0}} {
		w := HostMemoryWall(c.guest, c.reserve)
		if min := (c.guest + MemoryOverheadMB + c.reserve) << 20; w < min || w >= min+1000*page {
			t.Errorf("HostMemoryWall(%d, %d) = %d, want in [%d, %d)", c.guest, c.reserve, w, min, min+1000*page)
		}
		if w%(1000*page) != 0 {
			t.Errorf("HostMemoryWall(%d, %d) = %d pages, not a multiple of 1000", c.guest, c.reserve, w/page)
		}
	}
}

// TestOOMReserve: the reserve is charged to the sandbox's memory cgroup
// (not to the caller's), leaves it with removeReserve, and one whose
// cgroup is gone is found as an orphan.
func TestOOMReserve(t *testing.T) {
	testenv.Require(t, os.Geteuid() == 0, "needs root")
	root := "/" + testenv.Name("warren-reserve-")
	cg := root + "/sbx-test"
	dir := filepath.Join(oci.CgroupRoot, "memory", cg)
	_, err := os.Stat(filepath.Join(oci.CgroupRoot, "memory"))
	testenv.Require(t, err == nil, "needs the cgroup v1 memory controller")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = removeReserve(cg)
		_ = os.Remove(dir)
		_ = os.Remove(filepath.Dir(dir))
	})
	usage := func() int64 {
		b, err := os.ReadFile(filepath.Join(dir, "memory.usage_in_bytes"))
		if err != nil {
			t.Fatal(err)
		}
		n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		return n
	}
	if err := makeReserve(cg, 8); err != nil {
		t.Fatal(err)
	}
	if !hasReserve(cg) {
		t.Fatal("no reserve file")
	}
	if u := usage(); u < 8<<20 {
		t.Fatalf("cgroup usage %d with an 8 MiB reserve", u)
	}
	if err := removeReserve(cg); err != nil {
		t.Fatal(err)
	}
	if u := usage(); u >= 8<<20 {
		t.Fatalf("cgroup usage %d after the reserve was removed", u)
	}
	if err := makeReserve(cg, 1); err != nil {
		t.Fatal(err)
	}
	if got := orphanReserves(root); len(got) != 0 {
		t.Fatalf("orphans %v while the cgroup exists", got)
	}
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	if got := orphanReserves(root); len(got) != 1 || got[0] != reservePath(cg) {
		t.Fatalf("orphans %v, want %s", got, reservePath(cg))
	}
}

// TestOOMReserveRefusesLinks: /dev/shm is every host user's: a link
// planted at a reserve's name is replaced, never followed (the reserve
// would have grown the file it names).
func TestOOMReserveRefusesLinks(t *testing.T) {
	testenv.Require(t, os.Geteuid() == 0, "needs root")
	_, err := os.Stat(filepath.Join(oci.CgroupRoot, "memory"))
	testenv.Require(t, err == nil, "needs the cgroup v1 memory controller")
	root := "/" + testenv.Name("warren-reserve-")
	cg := root + "/sbx-link"
	dir := filepath.Join(oci.CgroupRoot, "memory", cg)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = removeReserve(cg)
		_ = os.Remove(dir)
		_ = os.Remove(filepath.Dir(dir))
	})
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, reservePath(cg)); err != nil {
		t.Fatal(err)
	}
	if err := makeReserve(cg, 1); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(victim); err != nil || string(b) != "keep" {
		t.Fatalf("the link's target: %d bytes, %v; want its 4 bytes untouched", len(b), err)
	}
	st, err := os.Lstat(reservePath(cg))
	if err != nil || !st.Mode().IsRegular() || st.Size() != 1<<20 {
		t.Fatalf("reserve: %v, %v; want a regular file of 1 MiB", st, err)
	}
}
