package builder

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// FuzzSourceMatches: whatever COPY source a tenant names (paths, globs,
// links in the context to "/" and climbing out), the files read are the
// context's own, never the host's.
func FuzzSourceMatches(f *testing.F) {
	for _, s := range []string{"root/etc/shadow", "d/up/secret", "*/*", "d/u?/*", ".", "root", "d/../root/x", "[", "d/ok"} {
		f.Add(s)
	}
	outer := f.TempDir()
	secret := []byte("host secret")
	if err := os.WriteFile(filepath.Join(outer, "secret"), secret, 0o600); err != nil {
		f.Fatal(err)
	}
	ctxDir := filepath.Join(outer, "ctx")
	for _, err := range []error{
		os.MkdirAll(filepath.Join(ctxDir, "d"), 0o755),
		os.Symlink("/", filepath.Join(ctxDir, "root")),
		os.Symlink(outer, filepath.Join(ctxDir, "outer")),
		os.Symlink("../../../../../../..", filepath.Join(ctxDir, "d", "up")),
		os.Symlink("..", filepath.Join(ctxDir, "d", "parent")),
		os.WriteFile(filepath.Join(ctxDir, "d", "ok"), []byte("ok"), 0o644),
	} {
		if err != nil {
			f.Fatal(err)
		}
	}
	cr, err := os.OpenRoot(ctxDir)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { cr.Close() })
	f.Fuzz(func(t *testing.T, src string) {
		_ = walkSources(cr, src, func(_, rel string, fi fs.FileInfo) error {
			if !fi.Mode().IsRegular() {
				return nil
			}
			in, err := openRegular(cr, rel)
			if err != nil {
				return nil
			}
			defer in.Close()
			b := make([]byte, 64)
			n, _ := in.Read(b)
			if bytes.Equal(b[:n], secret) {
				t.Fatalf("COPY %q read the host's file through %q", src, rel)
			}
			return nil
		})
	})
}
