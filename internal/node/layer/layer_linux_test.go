package layer

import (
	"archive/tar"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/warren-sandbox/warren/internal/testenv"
)

type entry struct {
	name, body, link string
	typ              byte
	mode             int64
}

func mkTar(t *testing.T, entries []entry) *bytes.Buffer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		mode := e.mode
		if mode == 0 {
			mode = 0o644
		}
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: mode, Linkname: e.link, ModTime: time.Unix(1700000000, 0), Uid: 1000, Gid: 1000}
		if e.typ == tar.TypeReg {
			h.Size = int64(len(e.body))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if e.typ == tar.TypeReg {
			tw.Write([]byte(e.body))
		}
	}
	tw.Close()
	return &buf
}

func TestUnpack(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		layers  [][]entry
		want    map[string]string // path -> content ("" dir, "->x" symlink)
		missing []string
		outside string // a host path that must not be created
	}{
		{
			name: "files dirs links",
			layers: [][]entry{{
				{name: "etc/", typ: tar.TypeDir, mode: 0o755},
				{name: "etc/hello", typ: tar.TypeReg, body: "hi"},
				{name: "etc/link", typ: tar.TypeSymlink, link: "hello"},
				{name: "etc/hard", typ: tar.TypeLink, link: "etc/hello"},
				{name: "usr/bin/tool", typ: tar.TypeReg, body: "x", mode: 0o4755},
			}},
			want: map[string]string{"etc": "", "etc/hello": "hi", "etc/link": "->hello", "etc/hard": "hi", "usr/bin/tool": "x"},
		},
		{
			name: "dotdot clamped",
			layers: [][]entry{{
				{name: "../../escape", typ: tar.TypeReg, body: "no"},
			}},
			want: map[string]string{"escape": "no"},
		},
		{
			name: "symlink parent resolved inside root",
			layers: [][]entry{{
				{name: "evil", typ: tar.TypeSymlink, link: "/tmp"},
				{name: "evil/warren-escape-test", typ: tar.TypeReg, body: "no"},
			}},
			want:    map[string]string{"tmp/warren-escape-test": "no"},
			outside: "/tmp/warren-escape-test",
		},
		{
			name: "whiteouts",
			layers: [][]entry{
				{
					{name: "a/keep", typ: tar.TypeReg, body: "1"},
					{name: "a/gone", typ: tar.TypeReg, body: "1"},
					{name: "b/old", typ: tar.TypeReg, body: "1"},
				},
				{
					{name: "a/.wh.gone", typ: tar.TypeReg},
					{name: "b/.wh..wh..opq", typ: tar.TypeReg},
					{name: "b/new", typ: tar.TypeReg, body: "2"},
				},
			},
			want:    map[string]string{"a/keep": "1", "b/new": "2"},
			missing: []string{"a/gone", "b/old", "a/.wh.gone"},
		},
		{
			// A whiteout hides what the layers below hold, never what its
			// own layer wrote: here the opaque marker comes after an entry
			// of its directory (tars need not put it first).
			name: "opaque whiteout after its layer's own entries",
			layers: [][]entry{
				{
					{name: "etc/", typ: tar.TypeDir, mode: 0o755},
					{name: "etc/keep", typ: tar.TypeReg, body: "1"},
					{name: "etc/gone", typ: tar.TypeReg, body: "1"},
					{name: "opt/", typ: tar.TypeDir, mode: 0o755},
					{name: "opt/old", typ: tar.TypeReg, body: "1"},
					{name: "opt/sub/", typ: tar.TypeDir, mode: 0o755},
					{name: "opt/sub/x", typ: tar.TypeReg, body: "1"},
				},
				{
					{name: "etc/.wh.gone", typ: tar.TypeReg},
					{name: "opt/", typ: tar.TypeDir, mode: 0o755},
					{name: "opt/new", typ: tar.TypeReg, body: "2"},
					{name: "opt/.wh..wh..opq", typ: tar.TypeReg},
					{name: "etc/added", typ: tar.TypeReg, body: "2"},
					{name: "etc/.wh.added", typ: tar.TypeReg},
				},
			},
			want:    map[string]string{"etc/keep": "1", "etc/added": "2", "opt": "", "opt/new": "2"},
			missing: []string{"etc/gone", "etc/.wh.gone", "opt/old", "opt/sub", "opt/.wh..wh..opq"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			for _, l := range tc.layers {
				if err := Unpack(context.Background(), mkTar(t, l), dir, Options{}); err != nil {
					t.Fatalf("Unpack: %v", err)
				}
			}
			checkTree(t, dir, tc.want, tc.missing)
			if tc.outside != "" {
				if _, err := os.Lstat(tc.outside); err == nil {
					os.Remove(tc.outside)
					t.Fatalf("%s was written outside the root", tc.outside)
				}
			}
		})
	}
}

func checkTree(t *testing.T, dir string, want map[string]string, missing []string) {
	t.Helper()
	for p, content := range want {
		full := filepath.Join(dir, p)
		fi, err := os.Lstat(full)
		if err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		switch {
		case content == "":
			if !fi.IsDir() {
				t.Errorf("%s: not a directory", p)
			}
		case strings.HasPrefix(content, "->"):
			l, err := os.Readlink(full)
			if err != nil || l != content[2:] {
				t.Errorf("%s: link %q, %v; want %q", p, l, err, content[2:])
			}
		default:
			b, err := os.ReadFile(full)
			if err != nil || string(b) != content {
				t.Errorf("%s: content %q, %v; want %q", p, b, err, content)
			}
		}
	}
	for _, p := range missing {
		if _, err := os.Lstat(filepath.Join(dir, p)); err == nil {
			t.Errorf("%s exists, want it gone", p)
		}
	}
}

func TestUnpackKeepsModeAndOwner(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	err := Unpack(context.Background(), mkTar(t, []entry{{name: "bin/su", typ: tar.TypeReg, body: "x", mode: 0o4755}}), dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(filepath.Join(dir, "bin/su"), &st); err != nil {
		t.Fatal(err)
	}
	if st.Mode&0o7777 != 0o4755 {
		t.Errorf("mode %o, want 4755", st.Mode&0o7777)
	}
	if os.Geteuid() == 0 && (st.Uid != 1000 || st.Gid != 1000) {
		t.Errorf("owner %d:%d, want 1000:1000", st.Uid, st.Gid)
	}
	if st.Mtim.Sec != 1700000000 {
		t.Errorf("mtime %d, want 1700000000", st.Mtim.Sec)
	}
}

// TestOverlayFlatten writes through an overlay mount and flattens the
// layers: deletions, opaque directories and new files all land.
func TestOverlayFlatten(t *testing.T) {
	testenv.NeedRoot(t, "overlay mounts")
	t.Parallel()
	base := t.TempDir()
	if err := Unpack(context.Background(), mkTar(t, []entry{
		{name: "a/keep", typ: tar.TypeReg, body: "1"},
		{name: "a/gone", typ: tar.TypeReg, body: "1"},
		{name: "d/old", typ: tar.TypeReg, body: "1"},
		{name: "f", typ: tar.TypeReg, body: "old"},
	}), base, Options{}); err != nil {
		t.Fatal(err)
	}
	scratch := t.TempDir()
	m, err := MountOverlay([]string{base}, scratch)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Unmount() })
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Remove(filepath.Join(m.Merged, "a/gone")))
	must(os.RemoveAll(filepath.Join(m.Merged, "d")))
	must(os.Mkdir(filepath.Join(m.Merged, "d"), 0o755))
	must(os.WriteFile(filepath.Join(m.Merged, "d/new"), []byte("2"), 0o644))
	must(os.WriteFile(filepath.Join(m.Merged, "f"), []byte("new"), 0o644))
	must(m.Unmount())

	dst := t.TempDir()
	must(Flatten(context.Background(), []string{base, m.Upper}, dst))
	checkTree(t, dst, map[string]string{"a/keep": "1", "d/new": "2", "f": "new"}, []string{"a/gone", "d/old"})
	// The base layer is untouched.
	checkTree(t, base, map[string]string{"a/gone": "1", "d/old": "1", "f": "old"}, nil)
}
