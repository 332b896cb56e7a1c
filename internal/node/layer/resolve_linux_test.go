package layer

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestResolveInRoot: links, absolute or climbing, stop at the root; a
// dangling link resolves to its target inside the root; missing parts are
// kept.
func TestResolveInRoot(t *testing.T) {
	t.Parallel()
	outer := t.TempDir()
	root := filepath.Join(outer, "root")
	for _, err := range []error{
		os.MkdirAll(filepath.Join(root, "usr/lib"), 0o755),
		os.Symlink("usr/lib", filepath.Join(root, "lib")),
		os.Symlink("/", filepath.Join(root, "abs")),
		os.Symlink(outer, filepath.Join(root, "host")),
		os.Symlink("../../../../../..", filepath.Join(root, "usr/up")),
		os.Symlink("/nowhere/x", filepath.Join(root, "dangling")),
		os.Symlink("lib", filepath.Join(root, "chain")),
		os.Symlink("loop", filepath.Join(root, "loop")),
		os.WriteFile(filepath.Join(root, "usr/lib/f"), nil, 0o644),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	for rel, want := range map[string]string{
		"":                  "",
		"lib/f":             "usr/lib/f",
		"chain/f":           "usr/lib/f",
		"abs/usr/lib":       "usr/lib",
		"host/secret":       filepath.Join(outer[1:], "secret"),
		"usr/up/etc/shadow": "etc/shadow",
		"../../etc":         "etc",
		"dangling":          "nowhere/x",
		"dangling/y":        "nowhere/x/y",
		"missing/a/../b":    "missing/b",
		"lib/new/x":         "usr/lib/new/x",
	} {
		got, err := ResolveInRoot(root, rel)
		if err != nil || got != filepath.Join(root, want) {
			t.Errorf("ResolveInRoot(%q) = %q, %v; want %q", rel, got, err, filepath.Join(root, want))
		}
	}
	for _, rel := range []string{"loop/x", "usr/lib/f/x"} {
		if got, err := ResolveInRoot(root, rel); err == nil {
			t.Errorf("ResolveInRoot(%q) = %q, want an error", rel, got)
		}
	}
}

// FuzzResolveInRoot: whatever path a tenant names, and whatever links
// lie on the way (to "/", to the host, climbing with ".."), the result is
// inside the root.
func FuzzResolveInRoot(f *testing.F) {
	for _, s := range []string{"host/secret", "abs/../../etc", "up/up/x", "dangling/a/../../b", "a/./../../..", "//x//", "self/self/x"} {
		f.Add(s)
	}
	outer := f.TempDir()
	root := filepath.Join(outer, "root")
	for _, err := range []error{
		os.MkdirAll(filepath.Join(root, "d"), 0o755),
		os.Symlink("/", filepath.Join(root, "abs")),
		os.Symlink(outer, filepath.Join(root, "host")),
		os.Symlink("../../../..", filepath.Join(root, "d/up")),
		os.Symlink("d/up", filepath.Join(root, "up")),
		os.Symlink(outer+"/gone/x", filepath.Join(root, "dangling")),
		os.Symlink(".", filepath.Join(root, "self")),
	} {
		if err != nil {
			f.Fatal(err)
		}
	}
	f.Fuzz(func(t *testing.T, rel string) {
		got, err := ResolveInRoot(root, rel)
		if err != nil {
			return
		}
		if got != root && !strings.HasPrefix(got, root+"/") {
			t.Fatalf("ResolveInRoot(%q) = %q: outside the root", rel, got)
		}
	})
}
