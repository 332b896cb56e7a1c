package templates

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
)

// versionedRootFS is a tiny root filesystem tar whose /etc/base-version
// says version.
func versionedRootFS(t *testing.T, version string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range []struct{ name, body string }{
		{"./", ""}, {"./etc/", ""}, {"./home/", ""}, {"./home/user/", ""},
		{"./etc/passwd", "root:x:0:0:root:/root:/bin/bash\nuser:x:1000:1000::/home/user:/bin/bash\n"},
		{"./etc/base-version", version + "\n"},
	} {
		h := &tar.Header{Name: e.name, Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(e.body)), ModTime: time.Unix(1700000000, 0)}
		if strings.HasSuffix(e.name, "/") {
			h.Typeflag, h.Size = tar.TypeDir, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(e.body))
	}
	tw.Close()
	return buf.Bytes()
}

// writeTar writes body to p with modification time mtime (a later `make
// base-rootfs`).
func writeTar(t *testing.T, p string, body []byte, mtime time.Time) {
	t.Helper()
	if err := os.WriteFile(p, body, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(p, mtime, mtime); err != nil {
		t.Fatal(err)
	}
}

// phases runs fn with a progress function and returns the phases seen.
func phases(fn func(func(Progress)) error) ([]string, error) {
	var out []string
	err := fn(func(p Progress) {
		if len(out) == 0 || out[len(out)-1] != p.Phase {
			out = append(out, p.Phase)
		}
	})
	return out, err
}

func baseVersion(t *testing.T, c *Catalog, ref string) (string, string) {
	t.Helper()
	nt, err := c.Resolve(context.Background(), "any-team", ref)
	if err != nil {
		t.Fatalf("resolve %s: %v", ref, err)
	}
	b, err := os.ReadFile(filepath.Join(nt.RootFS, "etc/base-version"))
	if err != nil {
		t.Fatal(err)
	}
	return nt.BuildID, strings.TrimSpace(string(b))
}

// TestEnsureBaseFollowsTar: later starts reuse the base build while the
// tar is the same (without hashing it while size and time match), make a
// new build from a changed tar and move the default tag there, keep the
// old build's tree, and RebuildBase forces a new build.
func TestEnsureBaseFollowsTar(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	data := t.TempDir()
	tarPath := filepath.Join(t.TempDir(), "base-rootfs.tar")
	t0 := time.Now().Add(-time.Hour).Truncate(time.Second)
	v1 := versionedRootFS(t, "v1")
	writeTar(t, tarPath, v1, t0)
	open := func() *Catalog {
		return newCatalog(t, Config{DataDir: data, BaseRootFSTar: tarPath, Mmdebstrap: "/nonexistent/mmdebstrap"})
	}

	if err := open().EnsureBase(ctx, nil); err != nil {
		t.Fatal(err)
	}
	first, version := baseVersion(t, open(), "base")
	if version != "v1" {
		t.Fatalf("base version %q", version)
	}
	t.Run("fingerprint recorded", func(t *testing.T) {
		b, err := open().Build(ctx, first)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(v1)
		fp := b.RootFSTarFingerprint
		if fp == nil || fp.SHA256 != hex.EncodeToString(sum[:]) || fp.Size != int64(len(v1)) || !fp.ModTime.Equal(t0) {
			t.Fatalf("fingerprint %+v, want size %d, time %v, sha256 %x", fp, len(v1), t0, sum)
		}
	})

	steps := []struct {
		name string
		// change prepares the tar (nil: leave it).
		change     func(t *testing.T)
		force      bool
		wantNew    bool
		wantHash   bool
		wantVer    string
		checkAfter func(t *testing.T, c *Catalog, prev, cur string)
	}{
		{name: "same tar reused without hashing", wantVer: "v1"},
		{
			name:     "touched tar hashed and reused",
			change:   func(t *testing.T) { writeTar(t, tarPath, v1, t0.Add(time.Minute)) },
			wantHash: true, wantVer: "v1",
			checkAfter: func(t *testing.T, c *Catalog, _, cur string) {
				b, _ := c.Build(ctx, cur)
				if !b.RootFSTarFingerprint.ModTime.Equal(t0.Add(time.Minute)) {
					t.Errorf("new modification time not recorded: %+v", b.RootFSTarFingerprint)
				}
			},
		},
		{
			name:     "changed tar makes a new build",
			change:   func(t *testing.T) { writeTar(t, tarPath, versionedRootFS(t, "v2"), t0.Add(2*time.Minute)) },
			wantNew:  true,
			wantHash: true, wantVer: "v2",
			checkAfter: func(t *testing.T, c *Catalog, prev, cur string) {
				old, err := c.Build(ctx, prev)
				if err != nil || old.Status != BuildReady {
					t.Fatalf("old build %+v, %v: want it kept ready", old, err)
				}
				if b, err := os.ReadFile(filepath.Join(old.RootFSDir, "etc/base-version")); err != nil || string(b) != "v1\n" {
					t.Errorf("old build's tree: %q, %v", b, err)
				}
				tags, _ := c.ListTags(ctx, "", "base")
				if len(tags) != 1 || tags[0].BuildID != cur {
					t.Errorf("tags %+v, want default on %s", tags, cur)
				}
			},
		},
		{name: "forced rebuild of the same tar", force: true, wantNew: true, wantVer: "v2"},
		{name: "after the forced rebuild reused", wantVer: "v2"},
	}
	prev := first
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			if st.change != nil {
				st.change(t)
			}
			c := open()
			fn := c.EnsureBase
			if st.force {
				fn = c.RebuildBase
			}
			got, err := phases(func(p func(Progress)) error { return fn(ctx, p) })
			if err != nil {
				t.Fatal(err)
			}
			if hashed := slices.Contains(got, "hash"); hashed != st.wantHash {
				t.Errorf("phases %v: hashed %v, want %v", got, hashed, st.wantHash)
			}
			cur, version := baseVersion(t, c, "base")
			if (cur != prev) != st.wantNew {
				t.Errorf("build %s after %s: new %v, want %v", cur, prev, cur != prev, st.wantNew)
			}
			if version != st.wantVer {
				t.Errorf("base version %q, want %q", version, st.wantVer)
			}
			if st.checkAfter != nil {
				st.checkAfter(t, c, prev, cur)
			}
			prev = cur
		})
	}

	t.Run("old tree never made from another tar", func(t *testing.T) {
		c := open()
		old, err := c.Build(ctx, first)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.RemoveAll(old.RootFSDir); err != nil {
			t.Fatal(err)
		}
		if _, err := c.ensureRootFS(ctx, old); !errdefs.IsUnavailable(err) || !strings.Contains(err.Error(), "changed since") {
			t.Fatalf("ensureRootFS of a build whose tar changed: %v, want unavailable", err)
		}
		if _, err := os.Lstat(old.RootFSDir); err == nil {
			t.Error("a tree was made from the changed tar")
		}
	})
}

// TestEnsureBaseBeforeFingerprints: a base build recorded before
// fingerprints existed is kept (and gets one) when its tar is older than
// the build, and replaced when the tar is newer.
func TestEnsureBaseBeforeFingerprints(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tests := []struct {
		name     string
		tarAfter bool // the tar was written after the build was made
		wantNew  bool
	}{
		{"tar older than the build", false, false},
		{"tar newer than the build", true, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tarPath := filepath.Join(t.TempDir(), "base.tar")
			writeTar(t, tarPath, versionedRootFS(t, "v1"), time.Now().Add(-time.Hour))
			c := newCatalog(t, Config{BaseRootFSTar: tarPath, Mmdebstrap: "/nonexistent/mmdebstrap"})
			if err := c.EnsureBase(ctx, nil); err != nil {
				t.Fatal(err)
			}
			first, _ := baseVersion(t, c, "base")
			if _, err := c.store.UpdateBuild(ctx, first, func(b *Build) error {
				b.RootFSTarFingerprint = nil
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if tc.tarAfter {
				writeTar(t, tarPath, versionedRootFS(t, "v2"), time.Now().Add(time.Minute))
			}
			if err := c.EnsureBase(ctx, nil); err != nil {
				t.Fatal(err)
			}
			cur, _ := baseVersion(t, c, "base")
			if (cur != first) != tc.wantNew {
				t.Fatalf("new build %v, want %v", cur != first, tc.wantNew)
			}
			if b, _ := c.Build(ctx, cur); b.RootFSTarFingerprint == nil {
				t.Error("no fingerprint recorded")
			}
		})
	}
}

func TestPrintProgress(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		events []Progress
		want   string
	}{
		{
			name: "hash and unpack by tenths",
			events: []Progress{
				{Phase: "check", Message: "looking"},
				{Phase: "hash", Message: "checking x.tar", Total: 100},
				{Phase: "hash", Done: 5, Total: 100},
				{Phase: "hash", Done: 9, Total: 100},
				{Phase: "hash", Done: 55, Total: 100},
				{Phase: "hash", Done: 100, Total: 100},
				{Phase: "unpack", Message: "unpacking x.tar"},
				{Phase: "unpack", Done: 1, Total: 100},
				{Phase: "ready", Message: "ready"},
			},
			want: "> looking\n> checking x.tar\n> checking 0%\n> checking 50%\n> checking 100%\n> unpacking x.tar\n> unpacking 0%\n> ready\n",
		},
		{
			name:   "unknown total prints nothing",
			events: []Progress{{Phase: "unpack", Done: 5}},
			want:   "",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var buf bytes.Buffer
			p := PrintProgress(&buf, "> ")
			for _, e := range tc.events {
				p(e)
			}
			if buf.String() != tc.want {
				t.Errorf("printed %q, want %q", buf.String(), tc.want)
			}
		})
	}
}

// TestRebuildBaseWithMmdebstrap: with no pre-built tar, a forced rebuild
// runs mmdebstrap again (fresh packages) and tags the new build.
func TestRebuildBaseWithMmdebstrap(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	bin := t.TempDir()
	c := newCatalog(t, Config{Mmdebstrap: fakeMmdebstrap(t, bin, versionedRootFS(t, "v1"), false)})
	if err := c.EnsureBase(ctx, nil); err != nil {
		t.Fatal(err)
	}
	first, _ := baseVersion(t, c, "base")
	if err := c.EnsureBase(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if again, _ := baseVersion(t, c, "base"); again != first {
		t.Fatalf("second EnsureBase made build %s, want %s reused", again, first)
	}
	if err := c.RebuildBase(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if cur, _ := baseVersion(t, c, "base"); cur == first {
		t.Fatal("RebuildBase kept the old build")
	}
	runs, _ := os.ReadFile(filepath.Join(bin, "runs"))
	if n := strings.Count(string(runs), "run"); n != 2 {
		t.Errorf("mmdebstrap ran %d times, want 2", n)
	}
}

// TestRebuildRequestFailure: a requested rebuild that fails fails that
// start once; the next start goes on with the current build.
func TestRebuildRequestFailure(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	data := t.TempDir()
	tarPath := filepath.Join(t.TempDir(), "base.tar")
	writeTar(t, tarPath, versionedRootFS(t, "v1"), time.Now().Add(-time.Hour))
	c := newCatalog(t, Config{DataDir: data, BaseRootFSTar: tarPath, Mmdebstrap: "/nonexistent/mmdebstrap"})
	if err := c.EnsureBase(ctx, nil); err != nil {
		t.Fatal(err)
	}
	first, _ := baseVersion(t, c, "base")
	// Without the tar a rebuild needs mmdebstrap, which is missing.
	if err := os.Remove(tarPath); err != nil {
		t.Fatal(err)
	}
	if err := RequestBaseRebuild(data); err != nil {
		t.Fatal(err)
	}
	err := c.EnsureBase(ctx, nil)
	if !errdefs.IsUnavailable(err) || !strings.Contains(err.Error(), "rebuild request is dropped") {
		t.Fatalf("requested rebuild without mmdebstrap: %v", err)
	}
	if err := c.EnsureBase(ctx, nil); err != nil {
		t.Fatalf("the next start: %v", err)
	}
	if cur, _ := baseVersion(t, c, "base"); cur != first {
		t.Fatalf("base build %s, want %s kept", cur, first)
	}
}
