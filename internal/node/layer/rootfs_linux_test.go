package layer

import (
	"archive/tar"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/warren-sandbox/warren/internal/testenv"
)

// TestCleanRel: a tar's names as paths relative to the root; ".." stops
// at the root.
func TestCleanRel(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"": ".", "./": ".", "/": ".", "..": ".",
		"usr/bin/": "usr/bin", "./etc/passwd": "etc/passwd", "/etc/passwd": "etc/passwd",
		"a/../b": "b", "../x": "x", "a/../../x": "x", "a//b/./c": "a/b/c",
	} {
		if got := CleanRel(in); got != want {
			t.Errorf("CleanRel(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestUnpackRootFS unpacks an operator's root filesystem tar as the
// template catalog does: set-id bits, numeric owners, times (of
// directories too, whose children changed them), symbolic and hard
// links, device nodes and FIFOs, user.* extended attributes; a later
// entry of a name replaces the earlier one.
func TestUnpackRootFS(t *testing.T) {
	t.Parallel()
	testenv.NeedRoot(t, "owners and device nodes")
	mtime := time.Unix(1600000000, 0)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range []struct {
		h    tar.Header
		body string
	}{
		{h: tar.Header{Name: "./", Typeflag: tar.TypeDir, Mode: 0o755}},
		{h: tar.Header{Name: "usr/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: mtime}},
		{h: tar.Header{Name: "usr/bin/", Typeflag: tar.TypeDir, Mode: 0o755}},
		{h: tar.Header{Name: "usr/bin/sudo", Typeflag: tar.TypeReg, Mode: 0o4755, ModTime: mtime}, body: "#!/bin/sh\n"},
		{h: tar.Header{Name: "usr/bin/ping", Typeflag: tar.TypeReg, Mode: 0o755,
			PAXRecords: map[string]string{"SCHILY.xattr.user.warren": "yes"}}, body: "ping"},
		{h: tar.Header{Name: "bin", Typeflag: tar.TypeSymlink, Linkname: "usr/bin"}},
		{h: tar.Header{Name: "home/user/", Typeflag: tar.TypeDir, Mode: 0o750, Uid: 1000, Gid: 1000}},
		{h: tar.Header{Name: "home/user/notes", Typeflag: tar.TypeReg, Mode: 0o640, Uid: 1000, Gid: 1000}, body: "hello"},
		{h: tar.Header{Name: "home/user/notes-link", Typeflag: tar.TypeLink, Linkname: "home/user/notes"}},
		{h: tar.Header{Name: "dev/null", Typeflag: tar.TypeChar, Mode: 0o666, Devmajor: 1, Devminor: 3}},
		{h: tar.Header{Name: "run/fifo", Typeflag: tar.TypeFifo, Mode: 0o600}},
		{h: tar.Header{Name: "etc/", Typeflag: tar.TypeDir, Mode: 0o755,
			PAXRecords: map[string]string{"SCHILY.xattr.user.dir": "d"}}},
		{h: tar.Header{Name: "usr/bin/ping", Typeflag: tar.TypeReg, Mode: 0o755}, body: "ping2"},
	} {
		h := e.h
		h.Size = int64(len(e.body))
		if h.ModTime.IsZero() {
			h.ModTime = time.Unix(1700000000, 0)
		}
		h.Format = tar.FormatPAX
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(e.body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var progress int64
	if err := UnpackRootFS(context.Background(), &buf, dir, func(n int64) { progress = n }); err != nil {
		t.Fatal(err)
	}
	xattr := func(p, name string) string {
		b := make([]byte, 16)
		n, err := unix.Lgetxattr(filepath.Join(dir, p), name, b)
		if err != nil {
			return ""
		}
		return string(b[:n])
	}
	checks := []struct {
		name string
		fn   func(t *testing.T)
	}{
		{"setuid mode and times", func(t *testing.T) {
			st, err := os.Stat(filepath.Join(dir, "usr/bin/sudo"))
			if err != nil || st.Mode()&os.ModeSetuid == 0 || st.Mode().Perm() != 0o755 || !st.ModTime().Equal(mtime) {
				t.Errorf("sudo: %v, %v; want setuid 755 of %v", st, err, mtime)
			}
			if st, err := os.Stat(filepath.Join(dir, "usr")); err != nil || !st.ModTime().Equal(mtime) {
				t.Errorf("usr: %v, %v; want the tar's mtime %v", st, err, mtime)
			}
		}},
		{"numeric owners", func(t *testing.T) {
			for _, p := range []string{"home/user", "home/user/notes"} {
				st, err := os.Lstat(filepath.Join(dir, p))
				if err != nil {
					t.Fatal(err)
				}
				if sys := st.Sys().(*syscall.Stat_t); sys.Uid != 1000 || sys.Gid != 1000 {
					t.Errorf("%s owner %d:%d, want 1000:1000", p, sys.Uid, sys.Gid)
				}
			}
		}},
		{"links", func(t *testing.T) {
			if got, err := os.Readlink(filepath.Join(dir, "bin")); err != nil || got != "usr/bin" {
				t.Errorf("readlink bin = %q, %v", got, err)
			}
			a, _ := os.Stat(filepath.Join(dir, "home/user/notes"))
			b, err := os.Stat(filepath.Join(dir, "home/user/notes-link"))
			if err != nil || !os.SameFile(a, b) {
				t.Errorf("hard link not the same file: %v", err)
			}
		}},
		{"device node and fifo", func(t *testing.T) {
			st, err := os.Lstat(filepath.Join(dir, "dev/null"))
			if err != nil || st.Mode()&os.ModeCharDevice == 0 || st.Sys().(*syscall.Stat_t).Rdev != unix.Mkdev(1, 3) {
				t.Errorf("dev/null: %v, %v", st, err)
			}
			if st, err := os.Lstat(filepath.Join(dir, "run/fifo")); err != nil || st.Mode()&os.ModeNamedPipe == 0 {
				t.Errorf("run/fifo: %v, %v", st, err)
			}
		}},
		{"extended attributes", func(t *testing.T) {
			if got := xattr("etc", "user.dir"); got != "d" {
				t.Errorf("etc user.dir = %q, want d", got)
			}
		}},
		{"a later entry replaces", func(t *testing.T) {
			if b, _ := os.ReadFile(filepath.Join(dir, "usr/bin/ping")); string(b) != "ping2" {
				t.Errorf("ping = %q, want the later entry's", b)
			}
			if got := xattr("usr/bin/ping", "user.warren"); got != "" {
				t.Errorf("ping kept the replaced entry's xattr %q", got)
			}
		}},
		{"progress", func(t *testing.T) {
			if want := int64(len("#!/bin/sh\n") + len("ping") + len("hello") + len("ping2")); progress != want {
				t.Errorf("progress %d, want %d", progress, want)
			}
		}},
	}
	for _, c := range checks {
		t.Run(c.name, c.fn)
	}
}

// TestUnpackBaseRootFS unpacks the real base root filesystem
// ($WARREN_TEST_ROOTFS_TAR) as the catalog does.
func TestUnpackBaseRootFS(t *testing.T) {
	t.Parallel()
	testenv.NeedRoot(t, "owners and device nodes")
	tarPath := testenv.RootFSTar(t)
	f, err := os.Open(tarPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dir := t.TempDir()
	start := time.Now()
	if err := UnpackRootFS(context.Background(), f, dir, nil); err != nil {
		t.Fatal(err)
	}
	t.Logf("unpacked %s in %v", tarPath, time.Since(start))
	if st, err := os.Stat(filepath.Join(dir, "usr/bin/sudo")); err != nil || st.Mode()&os.ModeSetuid == 0 {
		t.Errorf("sudo: %v, %v; want it setuid", st, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "bin/bash")); err != nil {
		t.Errorf("bin/bash through the usr-merge link: %v", err)
	}
}
