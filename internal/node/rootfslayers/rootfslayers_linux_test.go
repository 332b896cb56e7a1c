package rootfslayers_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/warren-sandbox/warren/internal/node/rootfslayers"
	"github.com/warren-sandbox/warren/internal/rootfs"
	"github.com/warren-sandbox/warren/internal/testenv"
)

func TestLayers(t *testing.T) {
	testenv.NeedRoot(t, "loop devices and mounts")
	_, err := exec.LookPath("mkfs.ext4")
	testenv.Require(t, err == nil, "needs mkfs.ext4 (e2fsprogs)")
	ctx := context.Background()
	base := t.TempDir()
	lower := filepath.Join(base, "lower")
	if err := os.MkdirAll(filepath.Join(lower, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(lower, "etc", "os"), []byte("base"), 0o644); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(base, "layers")
	m, err := rootfs.New(rootfs.Config{DataRoot: root}, testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	l := rootfslayers.New(m, root)
	t.Cleanup(func() {
		for _, id := range []string{"a", "b", "c", "leak1", "leak2"} {
			_ = l.Destroy(context.Background(), id)
		}
		_ = l.DeleteSaved(context.Background(), "tmpl1")
	})

	merged, err := l.Create(ctx, "a", lower, 64)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(merged, "etc", "os")); err != nil || string(b) != "base" {
		t.Fatalf("lower file through the overlay: %q, %v", b, err)
	}
	if err := os.WriteFile(filepath.Join(merged, "mine"), []byte("a"), 0o644); err != nil {
		t.Fatal(err)
	}
	used, total, err := l.Usage(ctx, "a")
	if err != nil || total < 64<<20 || total > 128<<20 || used == 0 || used > total {
		t.Errorf("usage %d/%d, %v", used, total, err)
	}
	if err := l.Unmount(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(merged, "mine")); err == nil {
		t.Error("file visible after unmount")
	}
	if err := l.Copy(ctx, "a", "b"); err != nil {
		t.Fatal(err)
	}
	// A saved layer (a template snapshot's disk) and a sandbox made from it.
	if err := l.Save(ctx, "a", "tmpl1"); err != nil {
		t.Fatal(err)
	}
	mc, err := l.CreateFrom(ctx, "c", "tmpl1", lower)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(mc, "mine")); err != nil || string(b) != "a" {
		t.Errorf("sandbox from a saved layer: %q, %v", b, err)
	}
	if err := l.Destroy(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b"} {
		mb, err := l.Mount(ctx, id, lower)
		if err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(filepath.Join(mb, "mine")); err != nil || string(b) != "a" {
			t.Errorf("%s: layer file after mount: %q, %v", id, b, err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "sbx-b", "rootfs", "mine"), []byte("b"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(merged, "mine")); string(b) != "a" {
		t.Errorf("copy is not independent: a reads %q", b)
	}

	// Leaks: leak1 mounted, leak2 only an image; a and b are live.
	if _, err := l.Create(ctx, "leak1", lower, 16); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Create(ctx, "leak2", lower, 16); err != nil {
		t.Fatal(err)
	}
	if err := l.Unmount(ctx, "leak2"); err != nil {
		t.Fatal(err)
	}
	counts, err := l.ReclaimLeaked(ctx, map[string]bool{"a": true, "b": true}, map[string]bool{"a": true, "b": true})
	if err != nil {
		t.Fatal(err)
	}
	if counts["mount"] < 1 || counts["layer"] != 2 {
		t.Errorf("reclaimed %v, want leak1's mounts and two layers", counts)
	}
	entries, _ := os.ReadDir(root)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{"sbx-a", "sbx-b", "tpl-tmpl1"}) {
		t.Errorf("layer dirs %v (the saved layer must survive the reclaim)", names)
	}
	if err := l.DeleteSaved(ctx, "tmpl1"); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(merged, "mine")); err != nil || string(b) != "a" {
		t.Errorf("live layer touched by the reclaim: %q, %v", b, err)
	}
	for _, id := range []string{"a", "b"} {
		if err := l.Destroy(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if entries, _ := os.ReadDir(root); len(entries) != 0 {
		t.Errorf("left after destroy: %v", entries)
	}
}

// TestLayerTravels: what a sandbox changed in its layer (a new file with
// its owner, mode and a user attribute, a hard link, a symbolic link, a
// lower file deleted, a lower directory replaced by an opaque one) leaves
// as an OCI layer tar (ExportLayer) and becomes, applied over another copy
// of the lower tree (ImportSaved), a saved layer whose sandboxes see the
// same tree.
func TestLayerTravels(t *testing.T) {
	testenv.NeedRoot(t, "loop devices and mounts")
	_, err := exec.LookPath("mkfs.ext4")
	testenv.Require(t, err == nil, "needs mkfs.ext4 (e2fsprogs)")
	ctx := context.Background()
	base := t.TempDir()
	lowerA, lowerB := filepath.Join(base, "lower-a"), filepath.Join(base, "lower-b")
	for _, lower := range []string{lowerA, lowerB} {
		for _, d := range []string{"etc", "opt/old"} {
			if err := os.MkdirAll(filepath.Join(lower, d), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		for _, f := range []string{"etc/os", "etc/gone", "opt/old/file"} {
			if err := os.WriteFile(filepath.Join(lower, f), []byte("base"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	root := filepath.Join(base, "layers")
	m, err := rootfs.New(rootfs.Config{DataRoot: root}, testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	l := rootfslayers.New(m, root)
	t.Cleanup(func() {
		for _, id := range []string{"src", "dst"} {
			_ = l.Destroy(context.Background(), id)
		}
		_ = l.DeleteSaved(context.Background(), "moved")
	})
	merged, err := l.Create(ctx, "src", lowerA, 64)
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(merged, "home", "user"), 0o750))
	must(os.WriteFile(filepath.Join(merged, "home", "user", "started"), []byte("123\n"), 0o640))
	must(os.Chown(filepath.Join(merged, "home", "user", "started"), 1000, 1000))
	must(unix.Lsetxattr(filepath.Join(merged, "home", "user", "started"), "user.note", []byte("n"), 0))
	must(os.Link(filepath.Join(merged, "home", "user", "started"), filepath.Join(merged, "home", "user", "again")))
	must(os.Symlink("/etc/os", filepath.Join(merged, "home", "user", "os")))
	must(os.Remove(filepath.Join(merged, "etc", "gone")))
	must(os.RemoveAll(filepath.Join(merged, "opt", "old")))
	must(os.MkdirAll(filepath.Join(merged, "opt", "old"), 0o755))
	must(os.WriteFile(filepath.Join(merged, "opt", "old", "new"), []byte("new"), 0o644))

	var diff bytes.Buffer
	must(l.ExportLayer(ctx, "src", &diff, func(n string) bool { return n == "user.note" }))
	must(l.ImportSaved(ctx, "moved", lowerB, 64, bytes.NewReader(diff.Bytes()), func(n string) bool { return n == "user.note" }))
	got, err := l.CreateFrom(ctx, "dst", "moved", lowerB)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(got, "home", "user", "started")); err != nil || string(b) != "123\n" {
		t.Errorf("started = %q, %v", b, err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(filepath.Join(got, "home", "user", "started"), &st); err != nil || st.Uid != 1000 || st.Mode&0o777 != 0o640 || st.Nlink != 2 {
		t.Errorf("started: uid %d mode %o links %d, %v; want 1000, 640, 2", st.Uid, st.Mode&0o777, st.Nlink, err)
	}
	if v := make([]byte, 8); true {
		n, err := unix.Lgetxattr(filepath.Join(got, "home", "user", "started"), "user.note", v)
		if err != nil || string(v[:n]) != "n" {
			t.Errorf("user.note = %q, %v", v[:max(n, 0)], err)
		}
	}
	if l, err := os.Readlink(filepath.Join(got, "home", "user", "os")); err != nil || l != "/etc/os" {
		t.Errorf("os -> %q, %v", l, err)
	}
	if _, err := os.Stat(filepath.Join(got, "etc", "gone")); !os.IsNotExist(err) {
		t.Errorf("a deleted lower file is back: %v", err)
	}
	if _, err := os.Stat(filepath.Join(got, "opt", "old", "file")); !os.IsNotExist(err) {
		t.Errorf("a replaced lower directory's file is back: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(got, "etc", "os")); err != nil || string(b) != "base" {
		t.Errorf("etc/os = %q, %v", b, err)
	}
	if b, err := os.ReadFile(filepath.Join(got, "opt", "old", "new")); err != nil || string(b) != "new" {
		t.Errorf("opt/old/new = %q, %v", b, err)
	}
}
