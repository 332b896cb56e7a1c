package templates

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/nodeapi"
)

// TestEnsureSystemTemplate: a system template is made public, unowned,
// with its commands; later starts reuse its build while the tar and the
// commands are the same, and make a new one (keeping the old) when either
// changes.
func TestEnsureSystemTemplate(t *testing.T) {
	ctx := context.Background()
	data := t.TempDir()
	tarPath := filepath.Join(t.TempDir(), "ci.tar")
	writeTar(t, tarPath, versionedRootFS(t, "ci-1"), time.Unix(1700000000, 0))
	c := newCatalog(t, Config{DataDir: data, Mmdebstrap: "/nonexistent/mmdebstrap"})
	st := SystemTemplate{ID: "code-interpreter-v1", RootFSTar: tarPath, StartCmd: "server", ReadyCmd: "check",
		Env: map[string]string{"MPLBACKEND": "agg"}, CPUCount: 2, MemoryMB: 1024}

	b1, err := c.EnsureSystemTemplate(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	if b1.Status != BuildReady || b1.StartCmd != "server" || b1.ReadyCmd != "check" || b1.MemoryMB != 1024 ||
		b1.Env["MPLBACKEND"] != "agg" || b1.Env["PATH"] != DefaultPath || b1.SnapshotDir != "" {
		t.Fatalf("build %+v", b1)
	}
	tpl, err := c.Find(ctx, "some-team", "code-interpreter-v1")
	if err != nil || !tpl.Public || tpl.TeamID != "" {
		t.Fatalf("template %+v: %v", tpl, err)
	}
	if id, v := baseVersion(t, c, "code-interpreter-v1"); id != b1.ID || v != "ci-1" {
		t.Fatalf("resolve: %s %s", id, v)
	}
	if b, err := c.EnsureSystemTemplate(ctx, st, nil); err != nil || b.ID != b1.ID {
		t.Fatalf("second start: %v %v", b, err)
	}

	st.StartCmd = "server --new"
	b2, err := c.EnsureSystemTemplate(ctx, st, nil)
	if err != nil || b2.ID == b1.ID || b2.StartCmd != "server --new" {
		t.Fatalf("changed command: %+v %v", b2, err)
	}
	writeTar(t, tarPath, versionedRootFS(t, "ci-2"), time.Unix(1700000100, 0))
	b3, err := c.EnsureSystemTemplate(ctx, st, nil)
	if err != nil || b3.ID == b2.ID {
		t.Fatalf("changed tar: %+v %v", b3, err)
	}
	if id, v := baseVersion(t, c, "code-interpreter-v1"); id != b3.ID || v != "ci-2" {
		t.Fatalf("resolve after the new tar: %s %s", id, v)
	}
	if old, err := c.Build(ctx, b1.ID); err != nil || old.Status != BuildReady {
		t.Fatalf("old build: %+v %v", old, err)
	}

	if _, err := c.EnsureSystemTemplate(ctx, SystemTemplate{ID: "x", RootFSTar: filepath.Join(data, "missing.tar")}, nil); !errdefs.IsInvalid(err) {
		t.Fatalf("missing tar: %v", err)
	}
	if _, err := c.EnsureSystemTemplate(ctx, SystemTemplate{ID: BaseID, RootFSTar: tarPath}, nil); !errdefs.IsInvalid(err) {
		t.Fatalf("base as a system template: %v", err)
	}
}

// TestEnsureSystemTemplateSnapshot: the snapshot on ready is taken before
// the build is ready and recorded; a build whose snapshot failed is ready
// without one and replaced at the next start.
func TestEnsureSystemTemplateSnapshot(t *testing.T) {
	ctx := context.Background()
	tarPath := filepath.Join(t.TempDir(), "ci.tar")
	writeTar(t, tarPath, versionedRootFS(t, "ci-1"), time.Unix(1700000000, 0))
	c := newCatalog(t, Config{DataDir: t.TempDir(), Mmdebstrap: "/nonexistent/mmdebstrap"})
	fail := true
	var seen []string
	st := SystemTemplate{ID: "code-interpreter-v1", RootFSTar: tarPath, StartCmd: "server", ReadyCmd: "check", CPUCount: 1, MemoryMB: 512,
		Snapshot: func(_ context.Context, nt nodeapi.Template, readyCmd, dir string) error {
			seen = append(seen, nt.StartCmd+"|"+readyCmd)
			if fail {
				return errors.New("no checkpoint here")
			}
			return os.MkdirAll(dir, 0o700)
		}}
	b1, err := c.EnsureSystemTemplate(ctx, st, nil)
	if err != nil || b1.Status != BuildReady || b1.SnapshotDir != "" {
		t.Fatalf("failed snapshot: %+v %v", b1, err)
	}
	fail = false
	b2, err := c.EnsureSystemTemplate(ctx, st, nil)
	if err != nil || b2.ID == b1.ID || b2.SnapshotDir == "" || !dirExists(b2.SnapshotDir) {
		t.Fatalf("snapshot: %+v %v", b2, err)
	}
	if nt, err := c.Resolve(ctx, "t", "code-interpreter-v1"); err != nil || nt.SnapshotDir != b2.SnapshotDir {
		t.Fatalf("resolve: %+v %v", nt, err)
	}
	if b3, err := c.EnsureSystemTemplate(ctx, st, nil); err != nil || b3.ID != b2.ID {
		t.Fatalf("third start: %+v %v", b3, err)
	}
	if len(seen) != 2 || seen[0] != "server|check" {
		t.Fatalf("snapshots asked for: %q", seen)
	}
}

// TestCodeInterpreterScriptHasBase keeps the base template's packages and
// customize hooks in scripts/build-code-interpreter-rootfs.sh: its
// sandboxes behave as base's (user, sudo, resolver, PATH).
func TestCodeInterpreterScriptHasBase(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../scripts/build-code-interpreter-rootfs.sh")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^base=(\S+)$`).FindSubmatch(b)
	if m == nil || string(m[1]) != strings.Join(BasePackages, ",") {
		t.Fatalf("base= line %q, base packages %s", m, strings.Join(BasePackages, ","))
	}
	var hooks []string
	for _, h := range regexp.MustCompile(`--customize-hook='([^']*)'`).FindAllSubmatch(b, -1) {
		hooks = append(hooks, string(h[1]))
	}
	if len(hooks) < len(BaseHooks) || !slices.Equal(hooks[:len(BaseHooks)], BaseHooks) {
		t.Fatalf("script hooks:\n%s\nbase hooks:\n%s", strings.Join(hooks, "\n"), strings.Join(BaseHooks, "\n"))
	}
}
