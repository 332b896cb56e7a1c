package layer

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/testenv"
)

// A tenant's sandbox may hold a file named like a whiteout (".wh.x").
// Written into a layer it would come out on the other side as the
// deletion of "x", not as the file: WriteDiff refuses it, and the
// snapshot stays on its node.
func TestWriteDiffRefusesWhiteoutNames(t *testing.T) {
	upper := t.TempDir()
	if err := os.MkdirAll(filepath.Join(upper, "home"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(upper, "home", "ok"), []byte("a"), 0o644); err != nil {
		t.Fatal(err)
	}
	all := func(string) bool { return true }
	var buf bytes.Buffer
	if err := WriteDiff(context.Background(), upper, &buf, all); err != nil {
		t.Fatalf("an ordinary upper: %v", err)
	}
	if err := os.WriteFile(filepath.Join(upper, "home", ".wh.bashrc"), []byte("b"), 0o644); err != nil {
		t.Fatal(err)
	}
	buf.Reset()
	if err := WriteDiff(context.Background(), upper, &buf, all); !errors.Is(err, errdefs.ErrUnsupported) {
		t.Fatalf("an upper holding .wh.bashrc: err = %v, want unsupported", err)
	}
}

// TestWriteTreeRoundTrip: a tree written by WriteTree and unpacked as a
// tree comes back with its hard and symbolic links, modes, owners, the
// extended attributes keep accepts and its ".wh." names as files; device
// nodes and FIFOs are left out, as are the attributes keep refuses.
func TestWriteTreeRoundTrip(t *testing.T) {
	t.Parallel()
	testenv.NeedRoot(t, "owners, device nodes and trusted.* attributes")
	src := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(src, "etc"), 0o750))
	must(os.WriteFile(filepath.Join(src, "etc/a"), []byte("a"), 0o755))
	must(os.Chown(filepath.Join(src, "etc/a"), 1000, 1001))
	must(unix.Chmod(filepath.Join(src, "etc/a"), 0o4755)) // after chown, which clears it
	must(os.Link(filepath.Join(src, "etc/a"), filepath.Join(src, "etc/b")))
	must(os.Symlink("a", filepath.Join(src, "etc/l")))
	must(os.WriteFile(filepath.Join(src, ".wh.x"), []byte("w"), 0o644))
	must(unix.Mknod(filepath.Join(src, "null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
	must(unix.Mkfifo(filepath.Join(src, "fifo"), 0o600))
	must(unix.Lsetxattr(filepath.Join(src, "etc/a"), "user.keep", []byte("k"), 0))
	must(unix.Lsetxattr(filepath.Join(src, "etc/a"), "trusted.drop", []byte("d"), 0))
	keep := func(name string) bool { return name == "user.keep" }
	var buf bytes.Buffer
	must(WriteTree(context.Background(), src, &buf, keep))

	var names []string
	tr := tar.NewReader(bytes.NewReader(buf.Bytes()))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		must(err)
		names = append(names, h.Name)
		if _, ok := h.PAXRecords["SCHILY.xattr.trusted.drop"]; ok {
			t.Errorf("%s carries trusted.drop, which keep refuses", h.Name)
		}
	}
	if want := []string{".wh.x", "etc/", "etc/a", "etc/b", "etc/l"}; !slices.Equal(names, want) {
		t.Errorf("tar entries %q, want %q (no device node, no FIFO)", names, want)
	}

	dst := t.TempDir()
	must(Unpack(context.Background(), &buf, dst, Options{Tree: true, Xattr: keep}))
	checkTree(t, dst, map[string]string{".wh.x": "w", "etc": "", "etc/a": "a", "etc/b": "a", "etc/l": "->a"}, []string{"null", "fifo"})
	var a, b unix.Stat_t
	must(unix.Lstat(filepath.Join(dst, "etc/a"), &a))
	must(unix.Lstat(filepath.Join(dst, "etc/b"), &b))
	if a.Ino != b.Ino || a.Mode&0o7777 != 0o4755 || a.Uid != 1000 || a.Gid != 1001 {
		t.Errorf("etc/a: ino %d (etc/b %d), mode %o, owner %d:%d; want one file, 4755, 1000:1001", a.Ino, b.Ino, a.Mode&0o7777, a.Uid, a.Gid)
	}
	v := make([]byte, 8)
	if n, err := unix.Lgetxattr(filepath.Join(dst, "etc/a"), "user.keep", v); err != nil || string(v[:n]) != "k" {
		t.Errorf("user.keep = %q, %v", v[:n], err)
	}
}
