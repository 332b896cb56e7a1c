package layer

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// FuzzUnpack: whatever tar (or gzip'd tar) a tenant sends, Unpack writes
// only inside its root: nothing appears beside it, the host file beside it
// is unchanged, and no file in the root is a hard link to it. Seeds are in
// testdata/fuzz/FuzzUnpack; scripts/fuzz.sh runs it for a bounded time.
func FuzzUnpack(f *testing.F) {
	seed := func(entries []entry) []byte {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		for _, e := range entries {
			h := &tar.Header{Name: e.name, Typeflag: e.typ, Linkname: e.link, Mode: 0o644}
			if e.typ == tar.TypeReg {
				h.Size = int64(len(e.body))
			}
			tw.WriteHeader(h)
			tw.Write([]byte(e.body))
		}
		tw.Close()
		return buf.Bytes()
	}
	f.Add(seed([]entry{{name: "evil", typ: tar.TypeSymlink, link: "/"}, {name: "evil/victim", typ: tar.TypeReg, body: "x"}}), true)
	f.Add(seed([]entry{{name: "d/up", typ: tar.TypeSymlink, link: "../../../.."}, {name: "d/up/victim/", typ: tar.TypeDir}}), false)
	f.Add(seed([]entry{{name: "l", typ: tar.TypeLink, link: "../secret"}, {name: "../victim", typ: tar.TypeReg, body: "x"}}), true)
	f.Add(seed([]entry{{name: "a/.wh..wh..opq", typ: tar.TypeReg}, {name: ".wh.a", typ: tar.TypeReg}}), false)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(seed([]entry{{name: "z", typ: tar.TypeReg, body: string(make([]byte, 4096))}}))
	zw.Close()
	f.Add(gz.Bytes(), true)
	f.Fuzz(func(t *testing.T, data []byte, untrusted bool) {
		outer, err := os.MkdirTemp("", "tbuild-fuzz-")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(outer)
		secret := filepath.Join(outer, "secret")
		if err := os.WriteFile(secret, []byte("host"), 0o600); err != nil {
			t.Fatal(err)
		}
		root := filepath.Join(outer, "root")
		if err := os.Mkdir(root, 0o755); err != nil {
			t.Fatal(err)
		}
		var r io.Reader = bytes.NewReader(data)
		if zr, err := gzip.NewReader(bytes.NewReader(data)); err == nil {
			r = zr
		}
		_ = Unpack(context.Background(), r, root, Options{MaxBytes: 1 << 20, MaxEntries: 1000, Untrusted: untrusted})
		entries, err := os.ReadDir(outer)
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) != 2 {
			t.Fatalf("beside the root: %v", entries)
		}
		var st, sst os.FileInfo
		if sst, err = os.Lstat(secret); err != nil || !sst.Mode().IsRegular() {
			t.Fatalf("host file: %v", err)
		}
		if b, err := os.ReadFile(secret); err != nil || string(b) != "host" {
			t.Fatalf("host file changed: %q, %v", b, err)
		}
		filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
			if err == nil && fi.Mode().IsRegular() {
				st = fi
				if os.SameFile(st, sst) {
					t.Fatalf("%s is a hard link to the host file", p)
				}
			}
			return nil
		})
	})
}
