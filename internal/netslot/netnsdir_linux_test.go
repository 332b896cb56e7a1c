package netslot

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/warren-sandbox/warren/internal/mountinfo"
	"github.com/warren-sandbox/warren/internal/sandbox"
	"github.com/warren-sandbox/warren/internal/testenv"
)

func run(t testing.TB, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v: %s", name, args, err, out)
	}
}

// mountedAt reports whether the mount table has a mount on path.
func mountedAt(t testing.TB, path string) bool {
	t.Helper()
	mounts, err := mountinfo.Mounts()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range mounts {
		if m.Point == path {
			return true
		}
	}
	return false
}

// `ip netns add` makes /run/netns a mount point of its own; namespaces that
// lived in a plain /run/netns were hidden by that and could no longer be
// removed. The pool's own directory is not touched by it: slots made before
// and after are released, and nothing is left.
func TestIPNetnsAddHidesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p, cfg := newTestPool(t)
	before := []*Slot{acquire(t, p, cfg, Policy{}), acquire(t, p, cfg, Policy{})}
	name := testenv.Name("warren-test-")
	run(t, "ip", "netns", "add", name)
	t.Cleanup(func() { run(t, "ip", "netns", "del", name) })
	after := acquire(t, p, cfg, Policy{})
	for _, s := range append(before, after) {
		if err := p.Release(ctx, s); err != nil {
			t.Errorf("release %s: %v", s.NetNS, err)
		}
	}
	assertNothingLeft(t, cfg, nil)
}

// What an older Warren left in a plain legacy directory that `ip netns add`
// then hid is reclaimed when it carries the pool's alias; a hidden
// namespace of another tool stays.
func TestReclaimHiddenLegacyNamespace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p, cfg := newTestPool(t)
	legacy := filepath.Join(t.TempDir(), "netns")
	if err := os.Mkdir(legacy, 0o755); err != nil {
		t.Fatal(err)
	}
	p.legacyDir = legacy
	// The older Warren's namespace: the same namespace as a live slot of
	// this pool, mounted in the legacy directory too.
	s := acquire(t, p, cfg, Policy{})
	old := filepath.Join(legacy, s.NetNS)
	if err := os.WriteFile(old, nil, 0o444); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(s.NetNSPath, old, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	foreign := filepath.Join(legacy, "sbx-"+sandbox.NewID()+"-1")
	if err := os.WriteFile(foreign, nil, 0o444); err != nil {
		t.Fatal(err)
	}
	run(t, "unshare", "--net="+foreign, "true")
	// What `ip netns add` does to a plain directory, then the older
	// Warren's release: the copies go, the originals stay hidden.
	run(t, "mount", "--rbind", legacy, legacy)
	t.Cleanup(func() {
		_ = uncover(legacy, func() error { return unmountRemove(legacy, filepath.Base(foreign)) })
		for mountedAt(t, legacy) {
			if err := unix.Unmount(legacy, unix.MNT_DETACH); err != nil {
				t.Error(err)
				return
			}
		}
	})
	run(t, "mount", "--make-shared", legacy)
	for _, f := range []string{old, foreign} {
		if err := unix.Unmount(f, 0); err != nil {
			t.Fatal(err)
		}
		if !hidden(legacy, filepath.Base(f)) {
			t.Fatalf("%s is not hidden", f)
		}
	}
	// The slot of this pool goes from its own directory; the legacy copy
	// is now a leak.
	own := *s
	if err := p.Release(ctx, &own); err != nil {
		t.Fatal(err)
	}
	n, err := p.ReclaimLeaked(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Errorf("reclaimed %d objects, want 1 (the hidden legacy namespace)", n)
	}
	if mountedAt(t, old) {
		t.Error("the hidden legacy namespace is still mounted")
	}
	if _, err := os.Lstat(old); !os.IsNotExist(err) {
		t.Errorf("legacy namespace file: %v", err)
	}
	if !mountedAt(t, foreign) {
		t.Error("another tool's hidden namespace was removed")
	}
	if !mountedAt(t, legacy) {
		t.Error("the mount on the legacy directory was not moved back")
	}
	assertNothingLeft(t, cfg, nil)
}

// A slot recorded by an older Warren in the legacy directory is adopted,
// and released there even after `ip netns add` hid its namespace.
func TestAdoptLegacySlot(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p, cfg := newTestPool(t)
	legacy := filepath.Join(t.TempDir(), "netns")
	if err := os.Mkdir(legacy, 0o755); err != nil {
		t.Fatal(err)
	}
	s := acquire(t, p, cfg, Policy{})
	old := filepath.Join(legacy, s.NetNS)
	if err := os.WriteFile(old, nil, 0o444); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(s.NetNSPath, old, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	// The slot as an older Warren recorded it; the pool's own file goes.
	if err := unmountRemove(cfg.NetNSDir, s.NetNS); err != nil {
		t.Fatal(err)
	}
	rec := *s
	rec.NetNSPath = old
	p2i, err := NewPool(cfg, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	p2 := p2i.(*pool)
	p2.legacyDir = legacy
	if err := p2.Adopt(ctx, &rec); err != nil {
		t.Fatalf("adopt a legacy slot: %v", err)
	}
	bad := rec
	bad.NetNSPath = filepath.Join(t.TempDir(), s.NetNS)
	if err := p2.Adopt(ctx, &bad); err == nil {
		t.Error("adopted a slot whose namespace is outside the pool's directories")
	}
	run(t, "mount", "--rbind", legacy, legacy)
	t.Cleanup(func() {
		for mountedAt(t, legacy) {
			if err := unix.Unmount(legacy, unix.MNT_DETACH); err != nil {
				t.Error(err)
				return
			}
		}
	})
	if err := unix.Unmount(old, 0); err != nil {
		t.Fatal(err)
	}
	if !hidden(legacy, s.NetNS) {
		t.Fatal("the legacy namespace is not hidden")
	}
	if err := p2.Release(ctx, &rec); err != nil {
		t.Fatal(err)
	}
	if mountedAt(t, old) {
		t.Error("the hidden legacy namespace is still mounted after release")
	}
	if _, err := os.Lstat(old); !os.IsNotExist(err) {
		t.Errorf("legacy namespace file after release: %v", err)
	}
	assertNothingLeft(t, cfg, nil)
}
