package layer

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/testenv"
)

// TestUnpackStaysInRoot: tars as a tenant would craft them (an upload, an
// image layer) neither write nor link anything outside the root.
func TestUnpackStaysInRoot(t *testing.T) {
	t.Parallel()
	outer := t.TempDir()
	secret := filepath.Join(outer, "secret")
	if err := os.WriteFile(secret, []byte("host"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		entries []entry
		wantErr bool
		// victim is a path in outer that must not appear.
		victim string
	}{
		{"dotdot names", []entry{
			{name: "../../victim", typ: tar.TypeReg, body: "x"},
			{name: "../../../victim/", typ: tar.TypeDir},
		}, false, "victim"},
		{"absolute link parent", []entry{
			{name: "evil", typ: tar.TypeSymlink, link: outer},
			{name: "evil/victim", typ: tar.TypeReg, body: "x"},
		}, false, "victim"},
		{"relative link climbing out", []entry{
			{name: "d/", typ: tar.TypeDir},
			{name: "d/up", typ: tar.TypeSymlink, link: "../../../../../../../../.." + outer},
			{name: "d/up/victim", typ: tar.TypeReg, body: "x"},
		}, false, "victim"},
		{"link replaced by a file through a link", []entry{
			{name: "l", typ: tar.TypeSymlink, link: secret},
			{name: "l", typ: tar.TypeReg, body: "overwritten"},
		}, false, ""},
		{"hard link to a host file through a link", []entry{
			{name: "s", typ: tar.TypeSymlink, link: outer},
			{name: "stolen", typ: tar.TypeLink, link: "s/secret"},
		}, true, ""},
		{"hard link climbing out", []entry{
			{name: "stolen", typ: tar.TypeLink, link: "../../../../../../.." + secret},
		}, true, ""},
		{"directory through a link", []entry{
			{name: "evil", typ: tar.TypeSymlink, link: outer},
			{name: "evil/victim/", typ: tar.TypeDir},
		}, false, "victim"},
		{"whiteout through a link", []entry{
			{name: "evil", typ: tar.TypeSymlink, link: outer},
			{name: "evil/.wh.secret", typ: tar.TypeReg},
		}, false, ""},
		{"whiteout of the parent", []entry{
			{name: ".wh...", typ: tar.TypeReg},
			{name: "d/.wh...", typ: tar.TypeReg},
			{name: "d/.wh..", typ: tar.TypeReg},
		}, true, ""},
		{"opaque whiteout through a link", []entry{
			{name: "evil", typ: tar.TypeSymlink, link: outer},
			{name: "evil/.wh..wh..opq", typ: tar.TypeReg},
		}, false, ""},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// Two levels below outer: "../../victim" would be outer's.
			root := filepath.Join(outer, "case"+strconv.Itoa(i), "root")
			if err := os.MkdirAll(root, 0o755); err != nil {
				t.Fatal(err)
			}
			err := Unpack(context.Background(), mkTar(t, tc.entries), root, Options{})
			if tc.wantErr && err == nil {
				t.Errorf("Unpack succeeded, want an error")
			}
			if !tc.wantErr && err != nil {
				t.Errorf("Unpack: %v", err)
			}
			if b, err := os.ReadFile(secret); err != nil || string(b) != "host" {
				t.Fatalf("host file changed: %q, %v", b, err)
			}
			if _, err := os.Stat(root); err != nil {
				t.Fatalf("the root itself is gone: %v", err)
			}
			if tc.victim != "" {
				if _, err := os.Lstat(filepath.Join(outer, tc.victim)); err == nil {
					os.RemoveAll(filepath.Join(outer, tc.victim))
					t.Fatalf("%s was written outside the root", tc.victim)
				}
			}
			filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
				if err == nil && fi.Mode().IsRegular() {
					if b, _ := os.ReadFile(p); string(b) == "host" {
						t.Errorf("%s in the root has the host file's content", p)
					}
				}
				return nil
			})
		})
	}
}

// TestUnpackUploadWhiteouts: in an upload, whiteout names are files; they
// delete nothing.
func TestUnpackUploadWhiteouts(t *testing.T) {
	t.Parallel()
	outer := t.TempDir()
	root := filepath.Join(outer, "root")
	os.Mkdir(root, 0o755)
	os.WriteFile(filepath.Join(root, "keep"), []byte("k"), 0o644)
	err := Unpack(context.Background(), mkTar(t, []entry{
		{name: ".wh...", typ: tar.TypeReg, body: "a"},
		{name: ".wh.keep", typ: tar.TypeReg, body: "b"},
		{name: ".wh..wh..opq", typ: tar.TypeReg, body: "c"},
	}), root, Options{Untrusted: true})
	if err != nil {
		t.Fatal(err)
	}
	checkTree(t, root, map[string]string{"keep": "k", ".wh...": "a", ".wh.keep": "b", ".wh..wh..opq": "c"}, nil)
}

// TestUnpackPolicies: device nodes only from the operator's tar, set-id
// bits and FIFOs not from a tenant's upload.
func TestUnpackPolicies(t *testing.T) {
	t.Parallel()
	testenv.NeedRoot(t, "device nodes")
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: "disk", Typeflag: tar.TypeBlock, Mode: 0o666, Devmajor: 7, Devminor: 0})
	tw.WriteHeader(&tar.Header{Name: "null", Typeflag: tar.TypeChar, Mode: 0o666, Devmajor: 1, Devminor: 3})
	tw.WriteHeader(&tar.Header{Name: "fifo", Typeflag: tar.TypeFifo, Mode: 0o644})
	tw.WriteHeader(&tar.Header{Name: "su", Typeflag: tar.TypeReg, Mode: 0o6755, Size: 1})
	tw.Write([]byte("x"))
	tw.Close()
	for _, c := range []struct {
		name       string
		opts       Options
		devs, fifo bool
		suMode     uint32
	}{
		{"upload", Options{Untrusted: true}, false, false, 0o755},
		{"image", Options{}, false, true, 0o6755},
		{"base tar", Options{Devices: true}, true, true, 0o6755},
	} {
		dir := t.TempDir()
		if err := Unpack(context.Background(), bytes.NewReader(buf.Bytes()), dir, c.opts); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		for _, n := range []string{"disk", "null"} {
			if _, err := os.Lstat(filepath.Join(dir, n)); (err == nil) != c.devs {
				t.Errorf("%s: device node %s present %v, want %v", c.name, n, err == nil, c.devs)
			}
		}
		if _, err := os.Lstat(filepath.Join(dir, "fifo")); (err == nil) != c.fifo {
			t.Errorf("%s: fifo present %v, want %v", c.name, err == nil, c.fifo)
		}
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(dir, "su"), &st); err != nil || st.Mode&0o7777 != c.suMode {
			t.Errorf("%s: su mode %o, %v; want %o", c.name, st.Mode&0o7777, err, c.suMode)
		}
	}
}

// TestUnpackLimits: a gzip bomb and a flood of entries stop at the limits
// with errdefs.ErrExhausted, having written no more than allowed.
func TestUnpackLimits(t *testing.T) {
	t.Parallel()
	// 64 MiB of zeros in one entry: a few tens of KiB gzip'd.
	var bomb bytes.Buffer
	zw := gzip.NewWriter(&bomb)
	tw := tar.NewWriter(zw)
	tw.WriteHeader(&tar.Header{Name: "zeros", Typeflag: tar.TypeReg, Mode: 0o644, Size: 64 << 20})
	io.CopyN(tw, zeroReader{}, 64<<20)
	tw.Close()
	zw.Close()
	dir := t.TempDir()
	zr, err := gzip.NewReader(bytes.NewReader(bomb.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	err = Unpack(context.Background(), zr, dir, Options{MaxBytes: 1 << 20, What: "for uploaded build contexts"})
	if !errdefs.IsExhausted(err) || !strings.Contains(err.Error(), "for uploaded build contexts") {
		t.Errorf("gzip bomb: %v, want the bytes limit", err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "zeros")); err == nil && fi.Size() > 1<<20+1 {
		t.Errorf("wrote %d bytes past a 1 MiB limit", fi.Size())
	}

	var many []entry
	for i := range 50 {
		many = append(many, entry{name: "f" + string(rune('a'+i%26)) + string(rune('a'+i/26)), typ: tar.TypeReg})
	}
	if err := Unpack(context.Background(), mkTar(t, many), t.TempDir(), Options{MaxEntries: 10}); !errdefs.IsExhausted(err) {
		t.Errorf("50 entries over a limit of 10: %v", err)
	}
	if err := Unpack(context.Background(), mkTar(t, many), t.TempDir(), Options{MaxEntries: 50, MaxBytes: 1}); err != nil {
		t.Errorf("within the limits: %v", err)
	}
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
