package templates

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/node/layer"
	"github.com/warren-sandbox/warren/internal/testenv"
)

func newCatalog(t *testing.T, cfg Config) *Catalog {
	t.Helper()
	if cfg.DataDir == "" {
		cfg.DataDir = t.TempDir()
	}
	if cfg.UnpackRootFS == nil {
		cfg.UnpackRootFS = layer.UnpackRootFS
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestCatalogBuildsAndTags(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newCatalog(t, Config{})
	tpl, b, err := c.CreateBuild(ctx, CreateRequest{TeamID: "t1", Name: "app:v1", Tags: []string{"x"}})
	if err != nil {
		t.Fatal(err)
	}
	if b.Status != BuildWaiting || tpl.CPUCount != DefaultCPU || tpl.MemoryMB != DefaultBuildMemoryMB {
		t.Fatalf("new build %+v of %+v", b, tpl)
	}
	if _, _, err := c.Lookup(ctx, "t1", "app"); !errdefs.IsNotFound(err) {
		t.Fatalf("lookup before ready: %v, want not found", err)
	}
	if _, err := c.UpdateBuild(ctx, b.ID, func(b *Build) error { b.RootFSDir = t.TempDir(); b.Env = map[string]string{"A": "1"}; return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := c.FinishBuild(ctx, b.ID, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.UpdateBuild(ctx, b.ID, func(*Build) error { return nil }); !errdefs.IsConflict(err) {
		t.Fatalf("update after finish: %v, want conflict", err)
	}

	t.Run("resolve", func(t *testing.T) {
		for _, ref := range []string{"app", "app:v1", "app:x", "app:default", tpl.ID} {
			nt, err := c.Resolve(ctx, "t1", ref)
			if err != nil {
				t.Fatalf("Resolve(%q): %v", ref, err)
			}
			if nt.ID != tpl.ID || nt.BuildID != b.ID || nt.Env["A"] != "1" || nt.User != DefaultUser || nt.Workdir != DefaultWorkdir {
				t.Fatalf("Resolve(%q) = %+v", ref, nt)
			}
		}
		if _, err := c.Resolve(ctx, "t1", "app:nope"); !errdefs.IsNotFound(err) {
			t.Fatalf("unknown tag: %v", err)
		}
	})
	t.Run("other team", func(t *testing.T) {
		if _, err := c.Resolve(ctx, "t2", "app"); !errdefs.IsNotFound(err) {
			t.Fatalf("private template seen by another team: %v", err)
		}
		if _, err := c.SetPublic(ctx, "t1", "app", true); err != nil {
			t.Fatal(err)
		}
		// A public template is reached by its ID or as "team/name",
		// never under the bare name, which stays the caller's own.
		if _, err := c.Resolve(ctx, "t2", "app"); !errdefs.IsNotFound(err) {
			t.Fatalf("another team's public template under a bare name: %v", err)
		}
		for _, ref := range []string{"t1/app", tpl.ID} {
			if nt, err := c.Resolve(ctx, "t2", ref); err != nil || nt.ID != tpl.ID {
				t.Fatalf("public template as %q: %+v, %v", ref, nt, err)
			}
		}
		if _, err := c.SetPublic(ctx, "t1", "app", false); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Find(ctx, "t2", "t1/app"); !errdefs.IsNotFound(err) {
			t.Fatalf("private template as team/name: %v", err)
		}
		if _, err := c.SetPublic(ctx, "t1", "app", true); err != nil {
			t.Fatal(err)
		}
		if err := c.Delete(ctx, "t2", "app"); !errdefs.IsNotFound(err) {
			t.Fatalf("delete by another team under the bare name: %v", err)
		}
		// Public means usable, not inspectable: for another team every
		// owner's operation answers as for a template that does not exist.
		if err := c.Delete(ctx, "t2", "t1/app"); !errdefs.IsNotFound(err) {
			t.Fatalf("delete by another team: %v", err)
		}
		if _, err := c.ListTags(ctx, "t2", "t1/app"); !errdefs.IsNotFound(err) {
			t.Fatalf("tags listed by another team: %v", err)
		}
	})
	t.Run("tags", func(t *testing.T) {
		got, err := c.AssignTags(ctx, "t1", "app:v1", []string{"prod"})
		if err != nil || got != b.ID {
			t.Fatalf("AssignTags = %q, %v", got, err)
		}
		tags, err := c.ListTags(ctx, "t1", "app")
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, tg := range tags {
			names = append(names, tg.Tag)
		}
		slices.Sort(names)
		if !slices.Equal(names, []string{"default", "prod", "v1", "x"}) {
			t.Fatalf("tags %v", names)
		}
		if err := c.DeleteTags(ctx, "t1", "app", []string{"prod"}); err != nil {
			t.Fatal(err)
		}
		if err := c.DeleteTags(ctx, "t1", "app", []string{"prod"}); !errdefs.IsNotFound(err) {
			t.Fatalf("delete a missing tag: %v", err)
		}
	})
	t.Run("second build keeps the default tag", func(t *testing.T) {
		_, b2, err := c.CreateBuild(ctx, CreateRequest{TeamID: "t1", Name: "app:v2"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.FinishBuild(ctx, b2.ID, &Reason{Message: "boom", Step: "3"}); err != nil {
			t.Fatal(err)
		}
		got, err := c.Build(ctx, b2.ID)
		if err != nil || got.Status != BuildError || got.Reason.Step != "3" {
			t.Fatalf("failed build %+v, %v", got, err)
		}
		if _, bb, err := c.Lookup(ctx, "t1", "app"); err != nil || bb.ID != b.ID {
			t.Fatalf("default tag moved to a failed build: %v", err)
		}
	})
	t.Run("delete", func(t *testing.T) {
		if err := os.MkdirAll(filepath.Join(c.BuildDir(b.ID), "rootfs"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := c.Delete(ctx, "t1", "app"); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Find(ctx, "t1", "app"); !errdefs.IsNotFound(err) {
			t.Fatalf("after delete: %v", err)
		}
		// The files stay where sandboxes expect them, for the collector.
		if _, err := os.Stat(filepath.Join(c.BuildDir(b.ID), "rootfs")); err != nil {
			t.Fatalf("build files moved at delete: %v", err)
		}
		plan, err := c.PlanGC(ctx)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, cd := range plan.Candidates {
			if cd.BuildID == b.ID {
				found = cd.Reason == GCDeleted && cd.Dir == c.BuildDir(b.ID)
			}
		}
		if !found {
			t.Fatalf("deleted build %s not a gc candidate: %+v", b.ID, plan.Candidates)
		}
		os.MkdirAll(filepath.Join(c.cfg.DataDir, "deleted", "other-build", "rootfs"), 0o755)
		if err := c.PurgeDeleted(ctx, func(id string) bool { return id == "other-build" }); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(c.cfg.DataDir, "deleted", "other-build")); err != nil {
			t.Fatalf("purged a build in use: %v", err)
		}
		if err := c.PurgeDeleted(ctx, nil); err != nil {
			t.Fatal(err)
		}
		if left, _ := os.ReadDir(filepath.Join(c.cfg.DataDir, "deleted")); len(left) != 0 {
			t.Fatalf("left after purge: %v", left)
		}
	})
}

func TestCreateBuildValidates(t *testing.T) {
	t.Parallel()
	c := newCatalog(t, Config{})
	odd := int64(1001)
	tests := []struct {
		name string
		req  CreateRequest
		msg  string
	}{
		{"bad name", CreateRequest{Name: "Bad Name"}, "template name"},
		{"odd memory", CreateRequest{Name: "ok", MemoryMB: &odd}, "Memory must be divisible by 2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := c.CreateBuild(context.Background(), tc.req)
			if !errdefs.IsInvalid(err) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("err = %v, want invalid %q", err, tc.msg)
			}
		})
	}
}

// smallRootFS is a tar of a tiny tree shaped like the base root filesystem.
func smallRootFS(t *testing.T) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(name string, typ byte, body string) {
		h := &tar.Header{Name: name, Typeflag: typ, Mode: 0o755, Size: int64(len(body))}
		if typ == tar.TypeDir {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(body))
	}
	add("./", tar.TypeDir, "")
	add("./etc/", tar.TypeDir, "")
	add("./etc/passwd", tar.TypeReg, "root:x:0:0:root:/root:/bin/bash\nuser:x:1000:1000::/home/user:/bin/bash\n")
	add("./home/", tar.TypeDir, "")
	add("./home/user/", tar.TypeDir, "")
	tw.Close()
	return buf.Bytes()
}

// fakeMmdebstrap writes a script that behaves like mmdebstrap: progress on
// stderr, the tar at its second-to-last argument. It counts its runs in
// dir/runs.
func fakeMmdebstrap(t *testing.T, dir string, rootfs []byte, fail bool) string {
	t.Helper()
	src := filepath.Join(dir, "rootfs.tar")
	if err := os.WriteFile(src, rootfs, 0o644); err != nil {
		t.Fatal(err)
	}
	body := "#!/bin/sh\necho run >> " + filepath.Join(dir, "runs") + "\n" +
		"echo 'I: chroot architecture amd64 is equal to the host architecture' >&2\n" +
		"echo \"ARGS $*\" >&2\n"
	if fail {
		body += "echo 'E: cannot reach the mirror' >&2\nexit 2\n"
	} else {
		body += "eval out=\\${$(($# - 1))}\ncp " + src + " \"$out\"\necho 'I: success' >&2\n"
	}
	p := filepath.Join(dir, "mmdebstrap")
	if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestEnsureBaseWithMmdebstrap(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t.Run("builds once, then reuses", func(t *testing.T) {
		t.Parallel()
		bin := t.TempDir()
		data := t.TempDir()
		c := newCatalog(t, Config{DataDir: data, Mmdebstrap: fakeMmdebstrap(t, bin, smallRootFS(t), false)})
		var phases []string
		var lines []string
		err := c.EnsureBase(ctx, func(p Progress) {
			if len(phases) == 0 || phases[len(phases)-1] != p.Phase {
				phases = append(phases, p.Phase)
			}
			if p.Phase == "bootstrap" {
				lines = append(lines, p.Message)
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(phases, []string{"check", "bootstrap", "unpack", "ready"}) {
			t.Errorf("phases %v", phases)
		}
		joined := strings.Join(lines, "\n")
		if !strings.Contains(joined, "I: success") || !strings.Contains(joined, "--include="+strings.Join(BasePackages, ",")) {
			t.Errorf("mmdebstrap output not relayed or wrong arguments: %s", joined)
		}
		nt, err := c.Resolve(ctx, "any-team", "base")
		if err != nil {
			t.Fatal(err)
		}
		if nt.User != "user" || nt.Workdir != "/home/user" || nt.Env["PATH"] != DefaultPath {
			t.Errorf("base template %+v", nt)
		}
		if _, err := os.Stat(filepath.Join(nt.RootFS, "home/user")); err != nil {
			t.Errorf("rootfs not unpacked: %v", err)
		}
		// Second start: reused, mmdebstrap not run again.
		c2 := newCatalog(t, Config{DataDir: data, Mmdebstrap: filepath.Join(bin, "mmdebstrap")})
		if err := c2.EnsureBase(ctx, nil); err != nil {
			t.Fatal(err)
		}
		nt2, err := c2.Resolve(ctx, "", "base")
		if err != nil || nt2.BuildID != nt.BuildID {
			t.Fatalf("second EnsureBase made build %q (%v), want %q reused", nt2.BuildID, err, nt.BuildID)
		}
		runs, _ := os.ReadFile(filepath.Join(bin, "runs"))
		if n := strings.Count(string(runs), "run"); n != 1 {
			t.Errorf("mmdebstrap ran %d times, want 1", n)
		}
		// A lost rootfs directory is unpacked again from the tar.
		if err := os.RemoveAll(nt.RootFS); err != nil {
			t.Fatal(err)
		}
		if _, err := c2.Resolve(ctx, "", "base"); err != nil {
			t.Fatalf("resolve after rootfs loss: %v", err)
		}
	})
	t.Run("mmdebstrap fails", func(t *testing.T) {
		t.Parallel()
		c := newCatalog(t, Config{Mmdebstrap: fakeMmdebstrap(t, t.TempDir(), nil, true)})
		err := c.EnsureBase(ctx, nil)
		if !errdefs.IsUnavailable(err) || !strings.Contains(err.Error(), "cannot reach the mirror") || !strings.Contains(err.Error(), "exit 2") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("no mmdebstrap", func(t *testing.T) {
		t.Parallel()
		c := newCatalog(t, Config{Mmdebstrap: "/nonexistent/mmdebstrap"})
		if err := c.EnsureBase(ctx, nil); !errdefs.IsUnavailable(err) || !strings.Contains(err.Error(), "apt-get install mmdebstrap") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("prebuilt tar skips mmdebstrap", func(t *testing.T) {
		t.Parallel()
		tarPath := filepath.Join(t.TempDir(), "base.tar")
		os.WriteFile(tarPath, smallRootFS(t), 0o644)
		c := newCatalog(t, Config{BaseRootFSTar: tarPath, Mmdebstrap: "/nonexistent/mmdebstrap"})
		if err := c.EnsureBase(ctx, nil); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("a catalog that unpacks no tar", func(t *testing.T) {
		t.Parallel()
		tarPath := filepath.Join(t.TempDir(), "base.tar")
		os.WriteFile(tarPath, smallRootFS(t), 0o644)
		c, err := New(Config{DataDir: t.TempDir(), BaseRootFSTar: tarPath, Mmdebstrap: "/nonexistent/mmdebstrap"})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.EnsureBase(ctx, nil); !errdefs.IsUnsupported(err) {
			t.Fatalf("EnsureBase without UnpackRootFS: %v, want unsupported", err)
		}
	})
}

// TestBaseScriptMatches keeps scripts/build-base-rootfs.sh and the Go
// mmdebstrap path installing the same packages.
func TestBaseScriptMatches(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../scripts/build-base-rootfs.sh")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^packages=(\S+)$`).FindSubmatch(b)
	if m == nil {
		t.Fatal("no packages= line in scripts/build-base-rootfs.sh")
	}
	if got, want := string(m[1]), strings.Join(BasePackages, ","); got != want {
		t.Fatalf("script installs %s, Go installs %s", got, want)
	}
	var hooks []string
	for _, h := range regexp.MustCompile(`--customize-hook='([^']*)'`).FindAllSubmatch(b, -1) {
		hooks = append(hooks, string(h[1]))
	}
	if !slices.Equal(hooks, BaseHooks) {
		t.Fatalf("script hooks:\n%s\nGo hooks:\n%s", strings.Join(hooks, "\n"), strings.Join(BaseHooks, "\n"))
	}
}

// TestEnsureBaseRealRootFS registers the real base root filesystem (the
// artifact of `make base-rootfs`, $WARREN_TEST_ROOTFS_TAR) and checks what
// E2B's base offers is in it. The mmdebstrap run itself is exercised by
// `make base-rootfs` (the same command line, see TestBaseScriptMatches),
// so this test does not repeat it.
func TestEnsureBaseRealRootFS(t *testing.T) {
	tarPath := testenv.RootFSTar(t)
	testenv.NeedRoot(t, "unpacking the base root filesystem")
	t.Parallel()
	ctx := context.Background()
	c := newCatalog(t, Config{BaseRootFSTar: tarPath, Mmdebstrap: "/nonexistent/mmdebstrap"})
	if err := c.EnsureBase(ctx, nil); err != nil {
		t.Fatal(err)
	}
	nt, err := c.Resolve(ctx, "", "base")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"usr/bin/bash", "usr/bin/python3", "usr/bin/python", "usr/bin/pip", "usr/bin/git", "usr/bin/curl", "usr/bin/sudo", "usr/bin/ps", "etc/ssl/certs", "home/user", "etc/sudoers.d/user"} {
		if _, err := os.Lstat(filepath.Join(nt.RootFS, p)); err != nil {
			t.Errorf("base rootfs lacks %s: %v", p, err)
		}
	}
	passwd, _ := os.ReadFile(filepath.Join(nt.RootFS, "etc/passwd"))
	if !regexp.MustCompile(`(?m)^user:x:1000:1000:.*:/home/user:/bin/bash$`).Match(passwd) {
		t.Errorf("no user 1000 in /etc/passwd:\n%s", passwd)
	}
	fi, err := os.Stat(filepath.Join(nt.RootFS, "usr/bin/sudo"))
	if err != nil || fi.Mode()&os.ModeSetuid == 0 {
		t.Errorf("sudo is not setuid: %v %v", fi, err)
	}
	// A login shell (what the SDK's commands run in) keeps the PATH it was
	// started with, for root and for user; without one it gets Debian's.
	for _, tc := range []struct{ user, path, want string }{
		{"user", "/opt/tools:/usr/bin:/bin", "/opt/tools:/usr/bin:/bin"},
		{"root", "/opt/tools:/usr/sbin:/usr/bin:/sbin:/bin", "/opt/tools:/usr/sbin:/usr/bin:/sbin:/bin"},
		{"user", "", "/usr/local/bin:/usr/bin:/bin:/usr/local/games:/usr/games"},
	} {
		env := []string{"HOME=/tmp"}
		if tc.path != "" {
			env = append(env, "PATH="+tc.path)
		}
		cmd := exec.Command("chroot", "--userspec="+tc.user, nt.RootFS, "/bin/bash", "-l", "-c", `printf %s "$PATH"`)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil || string(out) != tc.want {
			t.Errorf("bash -l as %s with PATH %q: PATH %q, %v; want %q", tc.user, tc.path, out, err, tc.want)
		}
	}
}

// TestNamesPerTeam is the name-capture attack: a name one team takes (even
// public) must not answer another team's create of that name, and reserved
// names stay the operator's.
func TestNamesPerTeam(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, err := New(Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	st := c.Store()
	now := time.Now()
	mk := func(id, team, alias string, public bool) {
		t.Helper()
		if err := st.CreateTemplate(ctx, &Template{ID: id, TeamID: team, Aliases: []string{alias}, Public: public, CreatedAt: now}); err != nil {
			t.Fatal(err)
		}
	}
	mk("sysbase", "", "base", false)
	mk("sysshared", "", "shared", false)
	mk("evilpublic", "tapi-evil", "my-agent", true) // taken first, public
	mk("evilshared", "tapi-evil", "shared", true)
	mk("victimown", "tapi-victim", "my-agent", false)
	for _, tc := range []struct {
		team, ref, want string // want "" → not found
	}{
		{"tapi-victim", "my-agent", "victimown"},
		{"tapi-other", "my-agent", ""},                     // only the evil team's public one exists: not under the bare name
		{"tapi-other", "tapi-evil/my-agent", "evilpublic"}, // explicit namespace reaches a public template
		{"tapi-other", "tapi-victim/my-agent", ""},         // private under its namespace
		{"tapi-victim", "tapi-victim/my-agent", "victimown"},
		{"tapi-other", "shared", "sysshared"}, // system template
		{"tapi-evil", "shared", "evilshared"}, // a team's own name wins over the system's
		{"tapi-other", "base", "sysbase"},
		{"tapi-other", "victimown", ""}, // private by ID
		{"tapi-other", "evilpublic", "evilpublic"},
		{"", "my-agent", ""},
		{"tapi-other", "/my-agent", ""},
	} {
		got, err := c.Find(ctx, tc.team, tc.ref)
		switch {
		case tc.want == "" && !errdefs.IsNotFound(err):
			t.Errorf("Find(%q, %q) = %v, %v; want not found", tc.team, tc.ref, got, err)
		case tc.want != "" && (err != nil || got.ID != tc.want):
			t.Errorf("Find(%q, %q) = %v, %v; want %s", tc.team, tc.ref, got, err, tc.want)
		}
	}
	// A team cannot take or shadow a reserved name.
	for _, name := range []string{"base", "code-interpreter-v1", "mcp-gateway:v2", "tapi-evil/base"} {
		if _, _, err := c.CreateBuild(ctx, CreateRequest{TeamID: "tapi-evil", Name: name}); !errors.Is(err, errdefs.ErrForbidden) {
			t.Errorf("team takes reserved name %q: %v", name, err)
		}
	}
	if _, _, err := c.CreateBuild(ctx, CreateRequest{TeamID: "tapi-evil", Name: "tapi-victim/x"}); !errdefs.IsInvalid(err) {
		t.Errorf("name in another team's namespace: %v", err)
	}
	// The same name in a second team is a second template.
	t1, _, err := c.CreateBuild(ctx, CreateRequest{TeamID: "tapi-a", Name: "app"})
	if err != nil {
		t.Fatal(err)
	}
	t2, _, err := c.CreateBuild(ctx, CreateRequest{TeamID: "tapi-b", Name: "app"})
	if err != nil || t2.ID == t1.ID || t2.TeamID != "tapi-b" {
		t.Fatalf("second team's app = %+v, %v (first %s)", t2, err, t1.ID)
	}
}
