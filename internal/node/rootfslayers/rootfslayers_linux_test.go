package rootfslayers_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/warren-sandbox/warren/internal/node/rootfslayers"
	"github.com/warren-sandbox/warren/internal/rootfs"
	"github.com/warren-sandbox/warren/internal/testenv"
)

func TestLayers(t *testing.T) {
	testenv.Require(t, os.Geteuid() == 0, "needs root (loop devices, mounts)")
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
