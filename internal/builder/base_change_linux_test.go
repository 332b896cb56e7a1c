package builder

import (
	"archive/tar"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/node/layer"
	"github.com/warren-sandbox/warren/internal/templates"
)

// withFile returns the tar rootfs with one more regular file.
func withFile(t *testing.T, rootfs []byte, name, body string) []byte {
	t.Helper()
	var buf bytes.Buffer
	buf.Write(rootfs[:len(rootfs)-1024]) // without the two zero blocks of its end
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(body)), ModTime: time.Unix(1700000000, 0)})
	tw.Write([]byte(body))
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestBaseChangeKeepsTemplates: after the base tar changed, the next
// EnsureBase makes a new base build; a template built on the old one
// still resolves with its files, its rebuild runs on the new base, and
// the old base tree stays.
func TestBaseChangeKeepsTemplates(t *testing.T) {
	needRoot(t)
	t.Parallel()
	ctx := context.Background()
	tiny := tinyRootFS(t)
	f := newFixture(t, withFile(t, tiny, "etc/base-version", "v1\n"))
	spec := Spec{Steps: []Step{{Type: StepRun, Args: []string{"cat /etc/base-version > /seen-base"}}}}
	app, err := f.build(t, "team", "on-base", spec)
	if err != nil {
		t.Fatalf("build: %v\n%s", err, f.logs(t, app.ID))
	}
	oldBase, err := f.cat.Resolve(ctx, "", "base")
	if err != nil {
		t.Fatal(err)
	}

	// `make base-rootfs` wrote a new tar.
	tarPath := filepath.Join(f.dir, "base.tar")
	if err := os.WriteFile(tarPath, withFile(t, tiny, "etc/base-version", "v2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Minute)
	os.Chtimes(tarPath, later, later)
	cat, err := templates.New(templates.Config{DataDir: filepath.Join(f.dir, "templates"), BaseRootFSTar: tarPath, UnpackRootFS: layer.UnpackRootFS})
	if err != nil {
		t.Fatal(err)
	}
	if err := cat.EnsureBase(ctx, nil); err != nil {
		t.Fatal(err)
	}
	newBase, err := cat.Resolve(ctx, "", "base")
	if err != nil {
		t.Fatal(err)
	}
	if newBase.BuildID == oldBase.BuildID || newBase.RootFS == oldBase.RootFS {
		t.Fatalf("base build %s (%s) after the tar changed, want a new one", newBase.BuildID, newBase.RootFS)
	}
	if got := readFile(t, newBase.RootFS, "etc/base-version"); got != "v2\n" {
		t.Errorf("new base: %q", got)
	}
	if got := readFile(t, oldBase.RootFS, "etc/base-version"); got != "v1\n" {
		t.Errorf("old base tree: %q", got)
	}
	nt, err := cat.Resolve(ctx, "team", "on-base")
	if err != nil || nt.BuildID != app.ID {
		t.Fatalf("template built on the old base: %+v, %v", nt, err)
	}
	if got := readFile(t, nt.RootFS, "seen-base"); got != "v1\n" {
		t.Errorf("template built on the old base: %q", got)
	}

	// A rebuild of the template runs on the new base, not from the cache.
	f.cat = cat
	f.b.cat = cat
	again, err := f.build(t, "team", "on-base", spec)
	if err != nil {
		t.Fatalf("rebuild: %v\n%s", err, f.logs(t, again.ID))
	}
	if logs := f.logs(t, again.ID); strings.Contains(logs, "CACHED [1]") {
		t.Errorf("rebuild on a new base hit the cache:\n%s", logs)
	}
	if got := readFile(t, again.RootFSDir, "seen-base"); got != "v2\n" {
		t.Errorf("rebuilt template saw base %q", got)
	}
	if got := readFile(t, nt.RootFS, "seen-base"); got != "v1\n" {
		t.Errorf("the old build of the template changed: %q", got)
	}
}
