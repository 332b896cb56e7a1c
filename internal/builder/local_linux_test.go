package builder

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/templates"
)

// TestRequestBaseRebuild: a request made on the data directory (`warren
// serve --rebuild-base`) makes the next EnsureBase build a new base from
// the same tar, once.
func TestRequestBaseRebuild(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	tarPath := filepath.Join(dir, "base.tar")
	if err := os.WriteFile(tarPath, tinyRootFS(t), 0o644); err != nil {
		t.Fatal(err)
	}
	ensure := func() string {
		t.Helper()
		l, err := OpenLocal(LocalConfig{DataDir: filepath.Join(dir, "data"), BaseRootFSTar: tarPath, Runner: ChrootRunner{}})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Service.Close()
		if err := l.Catalog.EnsureBase(ctx, nil); err != nil {
			t.Fatal(err)
		}
		nt, err := l.Catalog.Resolve(ctx, "", templates.BaseID)
		if err != nil {
			t.Fatal(err)
		}
		return nt.BuildID
	}
	first := ensure()
	if again := ensure(); again != first {
		t.Fatalf("EnsureBase without a request made build %s, want %s reused", again, first)
	}
	if err := RequestBaseRebuild(filepath.Join(dir, "data")); err != nil {
		t.Fatal(err)
	}
	rebuilt := ensure()
	if rebuilt == first {
		t.Fatal("the rebuild request was ignored")
	}
	if again := ensure(); again != rebuilt {
		t.Fatalf("the request was honoured twice: %s after %s", again, rebuilt)
	}
}

// TestNoRunnerRunsNoStep: an engine given no runner (OpenLocal without
// LocalConfig.Runner) refuses a build that has a RUN step, as unsupported,
// and still builds one that runs nothing.
func TestNoRunnerRunsNoStep(t *testing.T) {
	needRoot(t)
	t.Parallel()
	f := newFixtureWith(t, tinyRootFS(t), noRunner{})
	bd, err := f.build(t, "team", "copy-only", Spec{FromTemplate: "base", Steps: []Step{{Type: StepEnv, Args: []string{"A", "1"}}}})
	if err != nil {
		t.Fatalf("a build without RUN: %v\n%s", err, f.logs(t, bd.ID))
	}
	_, err = f.build(t, "team", "run", Spec{FromTemplate: "base", Steps: []Step{{Type: StepRun, Args: []string{"true"}}}})
	if !errdefs.IsUnsupported(err) {
		t.Fatalf("a RUN step without a runner: %v, want unsupported", err)
	}
}
