package rootfs

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/testenv"
)

func requireRoot(t testing.TB) {
	t.Helper()
	testenv.NeedRoot(t, "root filesystem tests")
}

func testLog(t testing.TB) *slog.Logger { return testenv.Logger(t) }

type entry struct {
	hdr  tar.Header
	body string
}

func makeTar(t testing.TB, entries []entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := e.hdr
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(e.body))
		}
		if h.ModTime.IsZero() {
			h.ModTime = time.Unix(1700000000, 0)
		}
		h.Format = tar.FormatPAX
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if e.body != "" {
			if _, err := io.WriteString(tw, e.body); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestCleanName(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in, want string
		bad      bool
	}{
		{in: "./", want: ""},
		{in: "usr/bin/", want: "usr/bin"},
		{in: "./etc/passwd", want: "etc/passwd"},
		{in: "/etc/passwd", want: "etc/passwd"},
		{in: "a/../b", want: "b"},
		{in: "../x", want: "x"}, // cleaned against "/": cannot climb
		{in: "a/../../x", want: "x"},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := cleanName(tc.in)
			if (err != nil) != tc.bad || got != tc.want {
				t.Errorf("cleanName(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
			}
		})
	}
}

func TestExtract(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	mtime := time.Unix(1600000000, 0)
	tarball := makeTar(t, []entry{
		{hdr: tar.Header{Name: "./", Typeflag: tar.TypeDir, Mode: 0o755}},
		{hdr: tar.Header{Name: "usr/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: mtime}},
		{hdr: tar.Header{Name: "usr/bin/", Typeflag: tar.TypeDir, Mode: 0o755}},
		{hdr: tar.Header{Name: "usr/bin/sudo", Typeflag: tar.TypeReg, Mode: 0o4755, ModTime: mtime}, body: "#!/bin/sh\n"},
		{hdr: tar.Header{Name: "usr/bin/ping", Typeflag: tar.TypeReg, Mode: 0o755,
			PAXRecords: map[string]string{"SCHILY.xattr.user.warren": "yes"}}, body: "ping"},
		{hdr: tar.Header{Name: "bin", Typeflag: tar.TypeSymlink, Linkname: "usr/bin"}},
		{hdr: tar.Header{Name: "home/user/", Typeflag: tar.TypeDir, Mode: 0o750, Uid: 1000, Gid: 1000}},
		{hdr: tar.Header{Name: "home/user/notes", Typeflag: tar.TypeReg, Mode: 0o640, Uid: 1000, Gid: 1000}, body: "hello"},
		{hdr: tar.Header{Name: "home/user/notes-link", Typeflag: tar.TypeLink, Linkname: "home/user/notes"}},
		{hdr: tar.Header{Name: "dev/null", Typeflag: tar.TypeChar, Mode: 0o666, Devmajor: 1, Devminor: 3}},
		{hdr: tar.Header{Name: "run/fifo", Typeflag: tar.TypeFifo, Mode: 0o600}},
		{hdr: tar.Header{Name: "usr/bin/ping", Typeflag: tar.TypeReg, Mode: 0o755}, body: "ping2"}, // duplicate replaces
	})
	dir := t.TempDir()
	if err := Extract(context.Background(), bytes.NewReader(tarball), dir); err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		name string
		fn   func(t *testing.T)
	}{
		{"setuid_mode_and_mtime", func(t *testing.T) {
			st, err := os.Stat(filepath.Join(dir, "usr/bin/sudo"))
			if err != nil {
				t.Fatal(err)
			}
			if st.Mode()&os.ModeSetuid == 0 || st.Mode().Perm() != 0o755 {
				t.Errorf("mode = %v", st.Mode())
			}
			if !st.ModTime().Equal(mtime) {
				t.Errorf("mtime = %v", st.ModTime())
			}
			if st, _ := os.Stat(filepath.Join(dir, "usr")); !st.ModTime().Equal(mtime) {
				t.Errorf("dir mtime = %v, want %v", st.ModTime(), mtime)
			}
		}},
		{"numeric_owner", func(t *testing.T) {
			for _, p := range []string{"home/user", "home/user/notes"} {
				st, err := os.Lstat(filepath.Join(dir, p))
				if err != nil {
					t.Fatal(err)
				}
				sys := st.Sys().(*syscall.Stat_t)
				if sys.Uid != 1000 || sys.Gid != 1000 {
					t.Errorf("%s owner = %d:%d", p, sys.Uid, sys.Gid)
				}
			}
		}},
		{"symlink", func(t *testing.T) {
			if got, err := os.Readlink(filepath.Join(dir, "bin")); err != nil || got != "usr/bin" {
				t.Errorf("readlink = %q, %v", got, err)
			}
		}},
		{"hardlink", func(t *testing.T) {
			a, _ := os.Stat(filepath.Join(dir, "home/user/notes"))
			b, err := os.Stat(filepath.Join(dir, "home/user/notes-link"))
			if err != nil || !os.SameFile(a, b) {
				t.Errorf("hard link not the same file: %v", err)
			}
		}},
		{"device_and_fifo", func(t *testing.T) {
			st, err := os.Lstat(filepath.Join(dir, "dev/null"))
			if err != nil || st.Mode()&os.ModeCharDevice == 0 || st.Sys().(*syscall.Stat_t).Rdev != unix.Mkdev(1, 3) {
				t.Errorf("dev/null: %v %v", st, err)
			}
			st, err = os.Lstat(filepath.Join(dir, "run/fifo"))
			if err != nil || st.Mode()&os.ModeNamedPipe == 0 {
				t.Errorf("fifo: %v %v", st, err)
			}
		}},
		{"duplicate_replaced", func(t *testing.T) {
			if b, _ := os.ReadFile(filepath.Join(dir, "usr/bin/ping")); string(b) != "ping2" {
				t.Errorf("ping = %q", b)
			}
		}},
	}
	for _, c := range checks {
		t.Run(c.name, c.fn)
	}
	t.Run("xattr", func(t *testing.T) {
		d := t.TempDir()
		tb := makeTar(t, []entry{{hdr: tar.Header{Name: "f", Typeflag: tar.TypeReg, Mode: 0o644,
			PAXRecords: map[string]string{"SCHILY.xattr.user.warren": "yes"}}, body: "x"}})
		if err := Extract(context.Background(), bytes.NewReader(tb), d); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 16)
		n, err := unix.Getxattr(filepath.Join(d, "f"), "user.warren", buf)
		if err != nil || string(buf[:n]) != "yes" {
			t.Errorf("xattr = %q, %v", buf[:n], err)
		}
	})
}

// TestExtractEscapes checks that no entry writes outside the target.
func TestExtractEscapes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		entries []entry
		wantErr bool
	}{
		{"dotdot_file_stays_inside", []entry{{hdr: tar.Header{Name: "../../outside", Typeflag: tar.TypeReg, Mode: 0o644}, body: "x"}}, false},
		{"write_through_absolute_symlink", []entry{
			{hdr: tar.Header{Name: "evil", Typeflag: tar.TypeSymlink, Linkname: "OUTSIDE"}},
			{hdr: tar.Header{Name: "evil/outside", Typeflag: tar.TypeReg, Mode: 0o644}, body: "x"},
		}, true},
		{"write_through_relative_symlink", []entry{
			{hdr: tar.Header{Name: "evil", Typeflag: tar.TypeSymlink, Linkname: "../.."}},
			{hdr: tar.Header{Name: "evil/outside", Typeflag: tar.TypeReg, Mode: 0o644}, body: "x"},
		}, true},
		{"hardlink_outside", []entry{
			{hdr: tar.Header{Name: "evil", Typeflag: tar.TypeSymlink, Linkname: "OUTSIDE"}},
			{hdr: tar.Header{Name: "link", Typeflag: tar.TypeLink, Linkname: "evil/victim"}},
		}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			base := t.TempDir()
			outside := filepath.Join(base, "outside-dir")
			target := filepath.Join(base, "a", "b")
			for _, d := range []string{outside, target} {
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.WriteFile(filepath.Join(outside, "victim"), []byte("v"), 0o644); err != nil {
				t.Fatal(err)
			}
			for i := range tc.entries {
				tc.entries[i].hdr.Linkname = strings.ReplaceAll(tc.entries[i].hdr.Linkname, "OUTSIDE", outside)
			}
			err := Extract(context.Background(), bytes.NewReader(makeTar(t, tc.entries)), target)
			if (err != nil) != tc.wantErr {
				t.Errorf("Extract error = %v, want error %v", err, tc.wantErr)
			}
			if _, err := os.Stat(filepath.Join(outside, "outside")); err == nil {
				t.Error("wrote outside the target through a symlink")
			}
			if _, err := os.Stat(filepath.Join(base, "outside")); err == nil {
				t.Error("wrote outside the target with ..")
			}
			if _, err := os.Stat(filepath.Join(target, "link")); err == nil {
				t.Error("hard link to a file outside the target")
			}
		})
	}
}

func TestUnpackConcurrentOnce(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	tarPath := filepath.Join(base, "r.tar")
	var entries []entry
	for i := 0; i < 200; i++ {
		entries = append(entries, entry{hdr: tar.Header{Name: fmt.Sprintf("d%d/f", i%10), Typeflag: tar.TypeReg, Mode: 0o644}, body: strings.Repeat("x", i)})
	}
	if err := os.WriteFile(tarPath, makeTar(t, entries), 0o644); err != nil {
		t.Fatal(err)
	}
	dest := filepath.Join(base, "templates", "t1")
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = Unpack(context.Background(), tarPath, dest)
			if errs[i] == nil {
				// Every caller sees the complete tree when it returns.
				if b, err := os.ReadFile(filepath.Join(dest, "d9/f")); err != nil || len(b) != 199 {
					errs[i] = fmt.Errorf("incomplete tree: %d bytes, %v", len(b), err)
				}
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if tmps, _ := filepath.Glob(dest + ".tmp-*"); len(tmps) > 0 {
		t.Errorf("temporary dirs left: %v", tmps)
	}
	if err := Unpack(context.Background(), filepath.Join(base, "missing.tar"), filepath.Join(base, "t2")); !errdefs.IsNotFound(err) {
		t.Errorf("missing tar: %v, want not found", err)
	}
	if _, err := os.Stat(filepath.Join(base, "t2")); err == nil {
		t.Error("failed unpack left its destination")
	}
}

// TestUnpackBaseRootfs unpacks the real base root filesystem when present.
func TestUnpackBaseRootfs(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	tarPath := testenv.RootFSTar(t)
	dest := filepath.Join(t.TempDir(), "base")
	start := time.Now()
	if err := Unpack(context.Background(), tarPath, dest); err != nil {
		t.Fatal(err)
	}
	t.Logf("unpacked %s in %v", tarPath, time.Since(start))
	st, err := os.Stat(filepath.Join(dest, "usr/bin/sudo"))
	if err != nil || st.Mode()&os.ModeSetuid == 0 {
		t.Errorf("sudo: %v, %v", st, err)
	}
	if _, err := os.Stat(filepath.Join(dest, "bin/bash")); err != nil {
		t.Errorf("bin/bash through the usr-merge symlink: %v", err)
	}
}

func TestWithin(t *testing.T) {
	t.Parallel()
	tests := []struct {
		root, p string
		want    bool
	}{
		{"/a", "/a", true}, {"/a", "/a/b", true}, {"/a", "/ab", false}, {"/a", "/", false}, {"", "/a", false}, {"/a", "/a/../b", false},
	}
	for _, tc := range tests {
		t.Run(tc.root+"|"+tc.p, func(t *testing.T) {
			if got := within(tc.root, filepath.Clean(tc.p)); got != tc.want {
				t.Errorf("within(%q, %q) = %v", tc.root, tc.p, got)
			}
		})
	}
}

func TestExtractLayerWhiteouts(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx := context.Background()
	reg := func(name, body string) entry {
		return entry{hdr: tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644}, body: body}
	}
	dirE := func(name string) entry { return entry{hdr: tar.Header{Name: name, Typeflag: tar.TypeDir, Mode: 0o755}} }
	layers := [][]entry{
		{dirE("etc/"), reg("etc/keep", "1"), reg("etc/gone", "1"), dirE("opt/"), reg("opt/old", "1"), dirE("opt/sub/"), reg("opt/sub/x", "1")},
		{reg("etc/.wh.gone", ""), dirE("opt/"), reg("opt/new", "2"), reg("opt/.wh..wh..opq", ""), reg("etc/added", "2")},
	}
	for i, l := range layers {
		if err := ExtractLayer(ctx, bytes.NewReader(makeTar(t, l)), dir); err != nil {
			t.Fatalf("layer %d: %v", i, err)
		}
	}
	for name, want := range map[string]bool{
		"etc/keep": true, "etc/gone": false, "etc/added": true, "etc/.wh.gone": false,
		"opt/new": true, "opt/old": false, "opt/sub": false, "opt/.wh..wh..opq": false,
	} {
		_, err := os.Lstat(filepath.Join(dir, name))
		if (err == nil) != want {
			t.Errorf("%s exists=%v, want %v", name, err == nil, want)
		}
	}
}

func TestUnpackGzip(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(makeTar(t, []entry{{hdr: tar.Header{Name: "hello", Typeflag: tar.TypeReg, Mode: 0o644}, body: "gz"}})); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	tarPath := filepath.Join(base, "r.tar.gz")
	if err := os.WriteFile(tarPath, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	dest := filepath.Join(base, "out")
	if err := Unpack(context.Background(), tarPath, dest); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dest, "hello")); err != nil || string(b) != "gz" {
		t.Errorf("hello = %q, %v", b, err)
	}
}
