package rootfs

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/warren-sandbox/warren/internal/errdefs"
)

// layerEnv is a data root with a small lower tree; everything it mounts is
// unmounted and detached at the end, even on failure.
type layerEnv struct {
	m     *Manager
	root  string
	lower string
}

func newLayerEnv(t testing.TB) *layerEnv {
	t.Helper()
	requireRoot(t)
	base := t.TempDir()
	root := filepath.Join(base, "data")
	m, err := New(Config{DataRoot: root}, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	lower := filepath.Join(base, "lower")
	if err := os.MkdirAll(filepath.Join(lower, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(lower, "etc", "template"), []byte("from template"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := m.ReclaimLeaked(context.Background(), nil); err != nil {
			t.Errorf("cleanup: %v", err)
		}
		if ms, _ := mountsUnder(root); len(ms) > 0 {
			t.Errorf("mounts left: %v", ms)
		}
		if loops := loopsUnder(t, root); len(loops) > 0 {
			t.Errorf("loop devices left: %v", loops)
		}
	})
	return &layerEnv{m: m, root: root, lower: lower}
}

func loopsUnder(t testing.TB, root string) []string {
	loops, err := listLoops()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range loops {
		if within(root, l.Backing) {
			out = append(out, l.Dev)
		}
	}
	return out
}

func (e *layerEnv) layer(id string, mb int64) Layer {
	return Layer{SandboxID: id, Lower: e.lower, Dir: filepath.Join(e.root, "sandboxes", id), DiskMB: mb}
}

func TestLayerLifecycle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newLayerEnv(t)
	l := e.layer("sbxa", 64)
	merged, err := e.m.Prepare(ctx, l)
	if err != nil {
		t.Fatal(err)
	}
	if merged != MergedDir(l.Dir) {
		t.Errorf("merged = %q", merged)
	}
	if _, err := e.m.Prepare(ctx, l); !errdefs.IsAlreadyExists(err) {
		t.Errorf("second Prepare: %v, want already exists", err)
	}

	t.Run("lower_visible_writes_land_in_layer", func(t *testing.T) {
		if b, err := os.ReadFile(filepath.Join(merged, "etc/template")); err != nil || string(b) != "from template" {
			t.Fatalf("template file through overlay: %q, %v", b, err)
		}
		if err := os.WriteFile(filepath.Join(merged, "etc/template"), []byte("changed"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(merged, "new"), []byte("sandbox data"), 0o644); err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(filepath.Join(e.lower, "etc/template")); string(b) != "from template" {
			t.Errorf("lower changed: %q", b)
		}
		if _, err := os.Stat(filepath.Join(e.lower, "new")); err == nil {
			t.Error("write landed in the lower dir")
		}
		if b, err := os.ReadFile(filepath.Join(l.Dir, layerDir, "upper", "new")); err != nil || string(b) != "sandbox data" {
			t.Errorf("upper: %q, %v", b, err)
		}
	})

	t.Run("full_layer_gives_ENOSPC", func(t *testing.T) {
		var hostBefore unix.Statfs_t
		if err := unix.Statfs(e.root, &hostBefore); err != nil {
			t.Fatal(err)
		}
		f, err := os.Create(filepath.Join(merged, "fill"))
		if err != nil {
			t.Fatal(err)
		}
		chunk := bytes.Repeat([]byte{0xab}, 1<<20)
		var werr error
		written := 0
		for i := 0; i < 200 && werr == nil; i++ { // the file already holds a few KiB
			var n int
			n, werr = f.Write(chunk)
			written += n
		}
		if werr == nil {
			werr = f.Sync()
		}
		f.Close()
		if !errors.Is(werr, syscall.ENOSPC) {
			t.Fatalf("after %d MiB: %v, want ENOSPC", written>>20, werr)
		}
		if written < 64<<20 || int64(written) > imageMB(64)<<20 {
			t.Errorf("wrote %d MiB into a 64 MiB layer", written>>20)
		}
		st, err := os.Stat(ImagePath(l.Dir))
		if err != nil || st.Size() != imageMB(64)<<20 {
			t.Errorf("image size = %v, %v", st, err)
		}
		// The host file system still takes writes.
		if err := os.WriteFile(filepath.Join(e.root, "host-ok"), []byte("ok"), 0o644); err != nil {
			t.Errorf("host write after layer filled: %v", err)
		}
		if err := os.Remove(filepath.Join(merged, "fill")); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("unmount_remount_keeps_files", func(t *testing.T) {
		if err := e.m.Unmount(ctx, l.Dir); err != nil {
			t.Fatal(err)
		}
		if mounted, _ := isMountPoint(merged); mounted {
			t.Fatal("still mounted after Unmount")
		}
		if loops := loopsUnder(t, l.Dir); len(loops) > 0 {
			t.Errorf("loop device left after Unmount: %v", loops)
		}
		if err := e.m.Unmount(ctx, l.Dir); err != nil {
			t.Errorf("second Unmount: %v", err)
		}
		got, err := e.m.Remount(ctx, Layer{Dir: l.Dir}, "")
		if err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(filepath.Join(got, "new")); err != nil || string(b) != "sandbox data" {
			t.Errorf("after remount: %q, %v", b, err)
		}
		if b, _ := os.ReadFile(filepath.Join(got, "etc/template")); string(b) != "changed" {
			t.Errorf("modified template file after remount: %q", b)
		}
		if _, err := e.m.Remount(ctx, Layer{Dir: l.Dir}, ""); !errdefs.IsConflict(err) {
			t.Errorf("remount of a mounted layer: %v, want conflict", err)
		}
	})

	t.Run("fork_copies_a_running_layer", func(t *testing.T) {
		child := e.layer("sbxb", 0)
		got, err := e.m.Remount(ctx, Layer{SandboxID: child.SandboxID, Dir: child.Dir}, l.Dir)
		if err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(filepath.Join(got, "new")); err != nil || string(b) != "sandbox data" {
			t.Errorf("fork: %q, %v", b, err)
		}
		if err := os.WriteFile(filepath.Join(got, "child-only"), []byte("c"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(merged, "child-only")); err == nil {
			t.Error("fork child's write visible in the parent")
		}
		md, err := readMeta(child.Dir)
		if err != nil || md.SandboxID != "sbxb" || md.DiskMB != 64 {
			t.Errorf("child meta = %+v, %v", md, err)
		}
		if err := e.m.Destroy(ctx, child.Dir); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("copy_without_mounting", func(t *testing.T) {
		c := e.layer("sbxc", 0)
		if err := e.m.Copy(ctx, Layer{SandboxID: c.SandboxID, Dir: c.Dir}, l.Dir); err != nil {
			t.Fatal(err)
		}
		if mounted, _ := isMountPoint(MergedDir(c.Dir)); mounted {
			t.Error("Copy mounted the copy")
		}
		if err := e.m.Copy(ctx, Layer{SandboxID: c.SandboxID, Dir: c.Dir}, l.Dir); !errdefs.IsAlreadyExists(err) {
			t.Errorf("second Copy: %v, want already exists", err)
		}
		got, err := e.m.Remount(ctx, Layer{Dir: c.Dir}, "")
		if err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(filepath.Join(got, "new")); err != nil || string(b) != "sandbox data" {
			t.Errorf("copy: %q, %v", b, err)
		}
		if err := e.m.Destroy(ctx, c.Dir); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("destroy_leaves_nothing", func(t *testing.T) {
		if err := e.m.Destroy(ctx, l.Dir); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(l.Dir); !os.IsNotExist(err) {
			t.Errorf("layer dir remains: %v", err)
		}
		if ms, _ := mountsUnder(e.root); len(ms) > 0 {
			t.Errorf("mounts remain: %v", ms)
		}
		if loops := loopsUnder(t, e.root); len(loops) > 0 {
			t.Errorf("loop devices remain: %v", loops)
		}
		if err := e.m.Destroy(ctx, l.Dir); err != nil {
			t.Errorf("second Destroy: %v", err)
		}
	})
}

func TestLayerValidation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newLayerEnv(t)
	tests := []struct {
		name string
		l    Layer
		want error
	}{
		{"outside_data_root", Layer{SandboxID: "x", Lower: e.lower, Dir: "/tmp/elsewhere", DiskMB: 8}, errdefs.ErrInvalid},
		{"data_root_itself", Layer{SandboxID: "x", Lower: e.lower, Dir: e.root, DiskMB: 8}, errdefs.ErrInvalid},
		{"relative_dir", Layer{SandboxID: "x", Lower: e.lower, Dir: "rel", DiskMB: 8}, errdefs.ErrInvalid},
		{"no_size", Layer{SandboxID: "x", Lower: e.lower, Dir: filepath.Join(e.root, "x"), DiskMB: 0}, errdefs.ErrInvalid},
		{"comma_in_lower", Layer{SandboxID: "x", Lower: e.lower + ",upperdir=/", Dir: filepath.Join(e.root, "x"), DiskMB: 8}, errdefs.ErrInvalid},
		{"missing_lower", Layer{SandboxID: "x", Lower: e.lower + "-missing", Dir: filepath.Join(e.root, "x"), DiskMB: 8}, errdefs.ErrNotFound},
		{"no_sandbox", Layer{Lower: e.lower, Dir: filepath.Join(e.root, "x"), DiskMB: 8}, errdefs.ErrInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := e.m.Prepare(ctx, tc.l); !errors.Is(err, tc.want) {
				t.Errorf("Prepare = %v, want %v", err, tc.want)
			}
		})
	}
	if _, err := e.m.Remount(ctx, e.layer("nothing", 8), ""); !errdefs.IsNotFound(err) {
		t.Errorf("Remount without image: %v, want not found", err)
	}
}

func TestReclaimLeaked(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newLayerEnv(t)
	keep, lost := e.layer("sbxkeep", 16), e.layer("sbxlost", 16)
	for _, l := range []Layer{keep, lost} {
		if _, err := e.m.Prepare(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	leaks, err := e.m.Leaked(ctx, map[string]bool{"sbxkeep": true})
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, l := range leaks {
		if l.SandboxID != "sbxlost" {
			t.Errorf("leak of a kept sandbox: %+v", l)
		}
		kinds[l.Kind]++
	}
	if kinds["mount"] != 2 || kinds["loop"] != 1 {
		t.Errorf("leaks = %+v", leaks)
	}
	n, err := e.m.ReclaimLeaked(ctx, map[string]bool{"sbxkeep": true})
	if err != nil || n < 2 {
		t.Errorf("ReclaimLeaked = %d, %v", n, err)
	}
	if ms, _ := mountsUnder(lost.Dir); len(ms) > 0 {
		t.Errorf("lost sandbox still mounted: %v", ms)
	}
	if loops := loopsUnder(t, lost.Dir); len(loops) > 0 {
		t.Errorf("lost sandbox loop remains: %v", loops)
	}
	if mounted, _ := isMountPoint(MergedDir(keep.Dir)); !mounted {
		t.Error("kept sandbox was unmounted")
	}
	for _, l := range []Layer{keep, lost} {
		if err := e.m.Destroy(ctx, l.Dir); err != nil {
			t.Error(err)
		}
	}
}

// BenchmarkLayerPrepareDestroy reports the time to create and mount a
// 1 GiB layer and to destroy it.
func BenchmarkLayerPrepareDestroy(b *testing.B) {
	ctx := context.Background()
	e := newLayerEnv(b)
	var prep, destroy time.Duration
	for i := 0; b.Loop(); i++ {
		l := e.layer("bench"+strings.Repeat("x", i%2)+string(rune('a'+i%26))+time.Now().Format("150405.000000000"), 1024)
		t0 := time.Now()
		if _, err := e.m.Prepare(ctx, l); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := e.m.Destroy(ctx, l.Dir); err != nil {
			b.Fatal(err)
		}
		prep += t1.Sub(t0)
		destroy += time.Since(t1)
	}
	b.ReportMetric(float64(prep.Microseconds())/float64(b.N)/1000, "ms-prepare/op")
	b.ReportMetric(float64(destroy.Microseconds())/float64(b.N)/1000, "ms-destroy/op")
}

// TestConcurrentLayers races loop device allocation and mounting.
func TestConcurrentLayers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newLayerEnv(t)
	const n = 8
	errs := make(chan error, 2*n)
	done := make(chan struct{})
	for i := 0; i < n; i++ {
		go func() {
			defer func() { done <- struct{}{} }()
			l := e.layer("conc"+string(rune('a'+i)), 32)
			merged, err := e.m.Prepare(ctx, l)
			if err != nil {
				errs <- err
				return
			}
			if err := os.WriteFile(filepath.Join(merged, "id"), []byte(l.SandboxID), 0o644); err != nil {
				errs <- err
			}
			if b, err := os.ReadFile(filepath.Join(merged, "id")); err != nil || string(b) != l.SandboxID {
				errs <- errors.New("layers mixed up: " + string(b))
			}
			if err := e.m.Destroy(ctx, l.Dir); err != nil {
				errs <- err
			}
		}()
	}
	for i := 0; i < n; i++ {
		<-done
	}
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestLayerFreeSpace: the layer offers at least DiskMB.
func TestLayerFreeSpace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newLayerEnv(t)
	for _, mb := range []int64{16, 64, 256, 1024, 4096} {
		t.Run(strconv.FormatInt(mb, 10), func(t *testing.T) {
			l := e.layer("free"+strconv.FormatInt(mb, 10), mb)
			if _, err := e.m.Prepare(ctx, l); err != nil {
				t.Fatal(err)
			}
			defer e.m.Destroy(ctx, l.Dir)
			var st unix.Statfs_t
			if err := unix.Statfs(MergedDir(l.Dir), &st); err != nil {
				t.Fatal(err)
			}
			if free := int64(st.Bavail) * st.Bsize >> 20; free < mb || free > mb+mb/4+16 {
				t.Errorf("free = %d MiB for DiskMB %d", free, mb)
			}
		})
	}
}

// holdMounts starts a process in a mount namespace of its own, which keeps
// a copy of every mount there is (as runsc's gofer does with a sandbox's
// root filesystem), and returns a func that ends it.
func holdMounts(t *testing.T) (release func()) {
	t.Helper()
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatalf("unshare (util-linux): %v", err)
	}
	pid := strconv.Itoa(cmd.Process.Pid)
	self, _ := os.Readlink("/proc/self/ns/mnt")
	for i := 0; ; i++ {
		ns, err := os.Readlink("/proc/" + pid + "/ns/mnt")
		comm, _ := os.ReadFile("/proc/" + pid + "/comm")
		if err == nil && ns != self && strings.TrimSpace(string(comm)) == "sleep" {
			break
		}
		if i == 500 {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatal("the holder did not enter its mount namespace")
		}
		time.Sleep(10 * time.Millisecond)
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
	}
	t.Cleanup(release)
	return release
}

// TestRemountWaitsForOutlivingFileSystem: a layer unmounted while another
// mount namespace still holds it (a runsc gofer that has not exited yet)
// keeps its file system, with writes not yet in the image. Mounting the
// image again beside it lost those writes (seen in CI as an empty file
// after a resume); Remount waits for it to go, and refuses after
// DetachWait rather than mounting the image twice.
func TestRemountWaitsForOutlivingFileSystem(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newLayerEnv(t)

	t.Run("remount_after_the_holder_lets_go", func(t *testing.T) {
		l := e.layer("sbxhold1", 32)
		merged, err := e.m.Prepare(ctx, l)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(merged, "written"), []byte("hello"), 0o644); err != nil {
			t.Fatal(err)
		}
		release := holdMounts(t)
		go func() {
			time.Sleep(300 * time.Millisecond)
			release()
		}()
		if err := e.m.Unmount(ctx, l.Dir); err != nil {
			t.Fatal(err)
		}
		merged, err = e.m.Remount(ctx, l, "")
		if err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(filepath.Join(merged, "written")); err != nil || string(b) != "hello" {
			t.Errorf("file written before the unmount, after the remount: %q, %v", b, err)
		}
		if err := e.m.Destroy(ctx, l.Dir); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("refused_while_held", func(t *testing.T) {
		m, err := New(Config{DataRoot: e.root, DetachWait: 200 * time.Millisecond}, testLog(t))
		if err != nil {
			t.Fatal(err)
		}
		l := e.layer("sbxhold2", 32)
		merged, err := m.Prepare(ctx, l)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(merged, "written"), []byte("kept"), 0o644); err != nil {
			t.Fatal(err)
		}
		release := holdMounts(t)
		if err := m.Unmount(ctx, l.Dir); !errdefs.IsUnavailable(err) {
			t.Errorf("Unmount while held: %v, want unavailable", err)
		}
		if _, err := m.Remount(ctx, l, ""); !errdefs.IsUnavailable(err) {
			t.Errorf("Remount while held: %v, want unavailable", err)
		}
		if loops := loopsUnder(t, l.Dir); len(loops) != 1 {
			t.Errorf("loop devices of the image while held: %v, want the one it had", loops)
		}
		release()
		merged, err = m.Remount(ctx, l, "")
		if err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(filepath.Join(merged, "written")); err != nil || string(b) != "kept" {
			t.Errorf("after the holder went: %q, %v", b, err)
		}
		if err := m.Destroy(ctx, l.Dir); err != nil {
			t.Fatal(err)
		}
	})
}
