package builder

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/templates"
)

// allSteps uses every step type; RUN records its PID so a cache hit (same
// PID in the result) can be told from a rerun.
func allSteps(contextDir string) Spec {
	return Spec{
		ContextDir: contextDir,
		Steps: []Step{
			{Type: StepEnv, Args: []string{"GREETING", "hello", "SECOND", "two words"}},
			{Type: StepArg, Args: []string{"BUILD_ONLY", "arg-value"}},
			{Type: StepWorkdir, Args: []string{"/srv/app"}},
			{Type: StepCopy, Args: []string{"hello.txt", "./"}},
			{Type: StepCopy, Args: []string{"conf", "/etc/app/", "", "0600"}},
			{Type: StepAdd, Args: []string{"hello.txt", "/opt/added.txt"}},
			{Type: StepRun, Args: []string{`echo "$GREETING $BUILD_ONLY $$" > /srv/app/run.txt; echo building`}},
			{Type: StepUser, Args: []string{"app"}},
			{Type: StepRun, Args: []string{`echo "$HOME" > /home/app/home.txt`}},
			{Type: StepCopy, Args: []string{"hello.txt", "/home/app/mine.txt", "app", ""}},
		},
	}
}

func makeContext(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "hello.txt"), []byte("hi from context\n"), 0o644)
	os.MkdirAll(filepath.Join(dir, "conf", "sub"), 0o755)
	os.WriteFile(filepath.Join(dir, "conf", "a.conf"), []byte("a=1\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "conf", "sub", "b.conf"), []byte("b=2\n"), 0o644)
	return dir
}

func owner(t *testing.T, p string) (uint32, uint32, os.FileMode) {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	return st.Uid, st.Gid, fi.Mode()
}

func TestBuildFromRegistryImage(t *testing.T) {
	needRoot(t)
	t.Parallel()
	reg := newRegistry(t, "", "")
	ref := reg.push(t, "test/tiny:1", tinyRootFS(t), v1.Config{Env: []string{"PATH=/bin:/usr/bin", "FROM_IMAGE=yes"}, WorkingDir: "/", Cmd: []string{"/bin/sh"}})
	f := newFixture(t, nil)
	reg.allowIn(f)
	ctxDir := makeContext(t)
	spec := allSteps(ctxDir)
	spec.FromImage = ref

	bd, err := f.build(t, "team", "every-step", spec)
	if err != nil {
		t.Fatalf("build: %v\n%s", err, f.logs(t, bd.ID))
	}
	root := bd.RootFSDir
	t.Run("result", func(t *testing.T) {
		if bd.Status != templates.BuildReady {
			t.Fatalf("status %s", bd.Status)
		}
		if got := readFile(t, root, "srv/app/run.txt"); !strings.HasPrefix(got, "hello arg-value ") {
			t.Errorf("RUN saw env/arg %q", got)
		}
		if got := readFile(t, root, "srv/app/hello.txt"); got != "hi from context\n" {
			t.Errorf("COPY into WORKDIR: %q", got)
		}
		if got := readFile(t, root, "etc/app/sub/b.conf"); got != "b=2\n" {
			t.Errorf("COPY of a directory: %q", got)
		}
		if _, _, mode := owner(t, filepath.Join(root, "etc/app/a.conf")); mode.Perm() != 0o600 {
			t.Errorf("COPY mode %v, want 0600", mode)
		}
		if got := readFile(t, root, "opt/added.txt"); got != "hi from context\n" {
			t.Errorf("ADD: %q", got)
		}
		if got := readFile(t, root, "home/app/home.txt"); got != "/home/app\n" {
			t.Errorf("RUN as the new user saw HOME %q", got)
		}
		passwd := readFile(t, root, "etc/passwd")
		if !strings.Contains(passwd, "app:x:1000:1000::/home/app:/bin/sh") {
			t.Errorf("USER did not create app:\n%s", passwd)
		}
		if uid, gid, _ := owner(t, filepath.Join(root, "home/app/home.txt")); uid != 1000 || gid != 1000 {
			t.Errorf("RUN as app wrote a file owned by %d:%d", uid, gid)
		}
		if uid, _, _ := owner(t, filepath.Join(root, "home/app/mine.txt")); uid != 1000 {
			t.Errorf("COPY with user: owner %d", uid)
		}
		if uid, _, _ := owner(t, filepath.Join(root, "srv/app/hello.txt")); uid != 0 {
			t.Errorf("COPY without user: owner %d, want root", uid)
		}
	})
	t.Run("metadata", func(t *testing.T) {
		if bd.Env["FROM_IMAGE"] != "yes" || bd.Env["GREETING"] != "hello" || bd.Env["SECOND"] != "two words" || bd.Env["PATH"] != "/bin:/usr/bin" {
			t.Errorf("env %v: want the image's ENV and the ENV steps", bd.Env)
		}
		if _, ok := bd.Env["BUILD_ONLY"]; ok {
			t.Errorf("ARG leaked into the template's env")
		}
		if bd.User != "app" || bd.Workdir != "/srv/app" {
			t.Errorf("user %q workdir %q", bd.User, bd.Workdir)
		}
		if bd.StartCmd != "" {
			t.Errorf("start command %q, want none (the image's CMD is not one)", bd.StartCmd)
		}
		nt, err := f.cat.Resolve(context.Background(), "team", "every-step")
		if err != nil || nt.Env["GREETING"] != "hello" || nt.User != "app" {
			t.Errorf("Resolve = %+v, %v", nt, err)
		}
	})
	t.Run("logs", func(t *testing.T) {
		logs := f.logs(t, bd.ID)
		for _, want := range []string{"base|info|FROM " + ref, "7|info|[7] RUN", "7|info|building", "|info|Build finished"} {
			if !strings.Contains(logs, want) {
				t.Errorf("logs lack %q:\n%s", want, logs)
			}
		}
	})
	t.Run("cache hit", func(t *testing.T) {
		bd2, err := f.build(t, "team", "every-step-2", spec)
		if err != nil {
			t.Fatal(err)
		}
		logs := f.logs(t, bd2.ID)
		for i := 1; i <= len(spec.Steps); i++ {
			if !strings.Contains(logs, "CACHED ["+itoa(i)+"]") {
				t.Errorf("step %d not cached:\n%s", i, logs)
			}
		}
		if strings.Contains(logs, "|info|building") {
			t.Errorf("RUN ran again on a cache hit")
		}
		if a, b := readFile(t, root, "srv/app/run.txt"), readFile(t, bd2.RootFSDir, "srv/app/run.txt"); a != b {
			t.Errorf("cached RUN result differs: %q vs %q", a, b)
		}
	})
	t.Run("changed file misses", func(t *testing.T) {
		os.WriteFile(filepath.Join(ctxDir, "hello.txt"), []byte("changed\n"), 0o644)
		t.Cleanup(func() { os.WriteFile(filepath.Join(ctxDir, "hello.txt"), []byte("hi from context\n"), 0o644) })
		bd3, err := f.build(t, "team", "every-step-3", spec)
		if err != nil {
			t.Fatal(err)
		}
		logs := f.logs(t, bd3.ID)
		if !strings.Contains(logs, "CACHED [3]") || strings.Contains(logs, "CACHED [4]") || strings.Contains(logs, "CACHED [7]") {
			t.Errorf("want steps 1-3 cached and 4 on rebuilt:\n%s", logs)
		}
		if got := readFile(t, bd3.RootFSDir, "srv/app/hello.txt"); got != "changed\n" {
			t.Errorf("COPY kept the old file: %q", got)
		}
	})
	t.Run("prune", func(t *testing.T) {
		ctx := context.Background()
		if n, err := f.b.PruneCache(ctx, time.Hour); err != nil || n != 0 {
			t.Fatalf("PruneCache(1h) removed %d, %v; want nothing", n, err)
		}
		n, err := f.b.PruneCache(ctx, -time.Second)
		if err != nil || n == 0 {
			t.Fatalf("PruneCache(all) removed %d, %v", n, err)
		}
		if got := readFile(t, root, "srv/app/hello.txt"); got != "hi from context\n" {
			t.Errorf("a built template lost files to pruning: %q", got)
		}
		bd5, err := f.build(t, "team", "every-step-5", spec)
		if err != nil {
			t.Fatal(err)
		}
		if logs := f.logs(t, bd5.ID); strings.Contains(logs, "CACHED") {
			t.Errorf("cache hits after pruning everything:\n%s", logs)
		}
	})
	t.Run("force", func(t *testing.T) {
		forced := spec
		forced.Force = true
		bd4, err := f.build(t, "team", "every-step-4", forced)
		if err != nil {
			t.Fatal(err)
		}
		logs := f.logs(t, bd4.ID)
		if strings.Contains(logs, "CACHED [") {
			t.Errorf("force used the cache:\n%s", logs)
		}
		if a, b := readFile(t, root, "srv/app/run.txt"), readFile(t, bd4.RootFSDir, "srv/app/run.txt"); a == b {
			t.Errorf("forced RUN did not run again (%q)", a)
		}
	})
}

func itoa(i int) string { return strconv.Itoa(i) }

func TestBuildFailures(t *testing.T) {
	needRoot(t)
	t.Parallel()
	reg := newRegistry(t, "", "")
	ref := reg.push(t, "test/tiny:1", tinyRootFS(t), v1.Config{Env: []string{"PATH=/bin"}})
	f := newFixture(t, nil)
	reg.allowIn(f)
	tests := []struct {
		name     string
		spec     Spec
		class    error
		step     string
		exitCode int
		output   string
	}{
		{
			name:     "failing RUN",
			spec:     Spec{FromImage: ref, Steps: []Step{{Type: StepEnv, Args: []string{"A", "1"}}, {Type: StepRun, Args: []string{"echo boom; echo to-stderr >&2; exit 3"}}, {Type: StepRun, Args: []string{"echo never"}}}},
			step:     "2",
			exitCode: 3,
			output:   "to-stderr",
		},
		{name: "missing image", spec: Spec{FromImage: reg.host + "/test/absent:1"}, class: errdefs.ErrNotFound, step: "base"},
		{name: "missing template", spec: Spec{FromTemplate: "no-such-template"}, class: errdefs.ErrNotFound, step: "base"},
		{name: "missing COPY source", spec: Spec{FromImage: ref, ContextDir: t.TempDir(), Steps: []Step{{Type: StepCopy, Args: []string{"nope.txt", "/"}}}}, class: errdefs.ErrInvalid, step: "1"},
		{name: "unknown user in RUN", spec: Spec{FromImage: ref, Steps: []Step{{Type: StepRun, Args: []string{"true", "ghost"}}}}, class: errdefs.ErrInvalid, step: "1"},
		{name: "bad step", spec: Spec{FromImage: ref, Steps: []Step{{Type: "HEALTHCHECK", Args: []string{"x"}}}}, class: errdefs.ErrInvalid, step: "1"},
		{name: "step timeout", spec: Spec{FromImage: ref, Steps: []Step{{Type: StepRun, Args: []string{"echo spinning; while :; do :; done"}}}}, class: errdefs.ErrExhausted, step: "1", output: "spinning"},
		{name: "ready command never passes", spec: Spec{FromImage: ref, StartCmd: "echo started", ReadyCmd: "exit 1"}, step: "ready", exitCode: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "step timeout" {
				old := f.b.cfg.StepTimeout
				f.b.cfg.StepTimeout = 500 * time.Millisecond
				defer func() { f.b.cfg.StepTimeout = old }()
			}
			if tc.step == "ready" {
				old := f.b.cfg.ReadyTimeout
				f.b.cfg.ReadyTimeout = 300 * time.Millisecond
				defer func() { f.b.cfg.ReadyTimeout = old }()
			}
			bd, err := f.build(t, "team", "fail-"+strings.ReplaceAll(strings.ToLower(tc.name), " ", "-"), tc.spec)
			var se *StepError
			if !errors.As(err, &se) {
				t.Fatalf("err = %v, want a StepError", err)
			}
			if se.Step != tc.step {
				t.Errorf("failed at step %q, want %q (%v)", se.Step, tc.step, err)
			}
			if tc.class != nil && !errors.Is(err, tc.class) {
				t.Errorf("err = %v, want class %v", err, tc.class)
			}
			if tc.exitCode != 0 && se.ExitCode != tc.exitCode {
				t.Errorf("exit code %d, want %d", se.ExitCode, tc.exitCode)
			}
			if tc.output != "" && !strings.Contains(se.Output, tc.output) {
				t.Errorf("output %q lacks %q", se.Output, tc.output)
			}
			if bd.Status != templates.BuildError || bd.Reason == nil || bd.Reason.Step != tc.step || bd.Reason.Message != err.Error() {
				t.Errorf("build record %+v reason %+v", bd, bd.Reason)
			}
			if logs := f.logs(t, bd.ID); !strings.Contains(logs, "error|Build failed") || strings.Contains(logs, "never") {
				t.Errorf("logs:\n%s", logs)
			}
		})
	}
}

func TestBuildRegistryBasicAuth(t *testing.T) {
	needRoot(t)
	t.Parallel()
	reg := newRegistry(t, "alice", "s3cret")
	ref := reg.push(t, "private/tiny:1", tinyRootFS(t), v1.Config{Env: []string{"PATH=/bin"}})
	f := newFixture(t, nil)
	reg.allowIn(f)
	tests := []struct {
		name  string
		auth  *RegistryAuth
		class error
	}{
		{"right credentials", &RegistryAuth{Username: "alice", Password: "s3cret"}, nil},
		{"wrong password", &RegistryAuth{Username: "alice", Password: "nope"}, errdefs.ErrUnauthorized},
		{"anonymous", nil, errdefs.ErrUnauthorized},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			spec := Spec{FromImage: ref, RegistryAuth: tc.auth, Steps: []Step{{Type: StepRun, Args: []string{"echo ok > /ok"}}}}
			bd, err := f.build(t, "team", "auth-"+strings.ReplaceAll(tc.name, " ", "-"), spec)
			if tc.class == nil {
				if err != nil {
					t.Fatal(err)
				}
				if got := readFile(t, bd.RootFSDir, "ok"); got != "ok\n" {
					t.Errorf("RUN result %q", got)
				}
				return
			}
			if !errors.Is(err, tc.class) {
				t.Fatalf("err = %v, want %v", err, tc.class)
			}
		})
	}
}

func TestBuildFromTemplateWithReadyCommand(t *testing.T) {
	needRoot(t)
	t.Parallel()
	f := newFixture(t, tinyRootFS(t))
	// From the base template (also what the SDK's default e2bdev/base means).
	parent, err := f.build(t, "team", "parent", Spec{FromImage: "e2bdev/base:latest", Steps: []Step{
		{Type: StepEnv, Args: []string{"PARENT", "1"}},
		{Type: StepRun, Args: []string{"echo parent > /parent.txt"}},
	}})
	if err != nil {
		t.Fatalf("%v\n%s", err, f.logs(t, parent.ID))
	}
	if parent.User != "user" || parent.Workdir != "/home/user" {
		t.Errorf("default user %q workdir %q, want user and /home/user", parent.User, parent.Workdir)
	}
	if !strings.Contains(readFile(t, parent.RootFSDir, "etc/passwd"), "user:x:1000:") {
		t.Errorf("default user not created")
	}
	child, err := f.build(t, "team", "child", Spec{
		FromTemplate: "parent",
		Steps:        []Step{{Type: StepRun, Args: []string{"cat /parent.txt > /child.txt; echo $PARENT >> /child.txt"}}},
		StartCmd:     "echo up > /tmp/started",
		ReadyCmd:     "test -f /tmp/started",
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, f.logs(t, child.ID))
	}
	if got := readFile(t, child.RootFSDir, "child.txt"); got != "parent\n1\n" {
		t.Errorf("child saw %q", got)
	}
	if child.StartCmd != "echo up > /tmp/started" || child.ReadyCmd != "test -f /tmp/started" || child.Env["PARENT"] != "1" {
		t.Errorf("child build %+v", child)
	}
	if _, err := os.Stat(filepath.Join(child.RootFSDir, "tmp/started")); err == nil {
		t.Errorf("the ready check's writes leaked into the template")
	}
	if logs := f.logs(t, child.ID); !strings.Contains(logs, "ready|info|Ready command passed") {
		t.Errorf("logs:\n%s", logs)
	}
}
