package builder

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/warren-sandbox/warren/internal/mountinfo"
	"github.com/warren-sandbox/warren/internal/node/layer"
	"github.com/warren-sandbox/warren/internal/templates"
	"github.com/warren-sandbox/warren/internal/testenv"
)

// crashHelperEnv names the data directory the crash helper builds in.
const crashHelperEnv = "WARREN_BUILDER_CRASH_HELPER"

// TestCrashHelper is not a test: TestCrashLeftoversRemoved runs the test
// binary with crashHelperEnv set to have it start a build whose RUN step
// blocks and an upload that never ends, print READY, and wait to be
// killed with SIGKILL (a `warren serve` killed mid-build).
func TestCrashHelper(t *testing.T) {
	dir := os.Getenv(crashHelperEnv)
	if dir == "" {
		t.Skip("helper process of TestCrashLeftoversRemoved")
	}
	ctx := context.Background()
	cat, err := templates.New(templates.Config{DataDir: filepath.Join(dir, "templates"), Mmdebstrap: "/nonexistent", UnpackRootFS: layer.UnpackRootFS})
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(Config{DataDir: filepath.Join(dir, "builder"), Catalog: cat, Runner: ChrootRunner{}})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := NewService(ServiceConfig{Builder: b})
	if err != nil {
		t.Fatal(err)
	}
	tpl, bd, err := svc.CreateTemplate(ctx, templates.CreateRequest{TeamID: "team", Name: "crashy"})
	if err != nil {
		t.Fatal(err)
	}
	// An upload that never ends.
	pr, pw := io.Pipe()
	go svc.PutFiles(ctx, tpl.ID, strings.Repeat("a", 64), pr)
	// More than the 512 bytes PutFiles reads to tell a gzip'd tar from a
	// plain one, so that it is writing the upload when the crash comes.
	go pw.Write(append([]byte{0x1f, 0x8b}, make([]byte, 1022)...))
	if _, err := svc.StartBuild(ctx, StartRequest{TeamID: "team", TemplateID: tpl.ID, BuildID: bd.ID, Spec: Spec{
		FromTemplate: "app",
		Steps:        []Step{{Type: StepRun, Args: []string{"echo crash-step-running > /proof; echo crash-step-running; exec /bin/sleep 600"}}},
	}}); err != nil {
		t.Fatal(err)
	}
	for {
		entries, _ := cat.Store().Logs(ctx, bd.ID, 0)
		running := slices.ContainsFunc(entries, func(e templates.LogEntry) bool { return e.Message == "crash-step-running" })
		ups, _ := filepath.Glob(filepath.Join(b.sess.dir, "upload-*"))
		if running && len(ups) > 0 {
			if fi, err := os.Stat(ups[0]); err == nil && fi.Size() > 0 {
				break
			}
		}
		if st, _ := cat.Build(ctx, bd.ID); st != nil && st.Status == templates.BuildError {
			t.Fatalf("crash build failed early: %+v", st.Reason)
		}
		time.Sleep(20 * time.Millisecond) // polling another process's progress
	}
	fmt.Printf("READY %s\n", bd.ID)
	select {} // until SIGKILL
}

// startCrashedBuild runs TestCrashHelper in a child process over dir and
// kills it with SIGKILL once its build's RUN step runs; it returns the
// crashed build's ID.
func startCrashedBuild(t *testing.T, dir string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashHelper$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashHelperEnv+"="+dir)
	cmd.Stderr = testenv.Output(t)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	t.Cleanup(func() {
		if !killed {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "READY ") {
				lines <- strings.TrimPrefix(sc.Text(), "READY ")
				io.Copy(io.Discard, out)
				return
			}
		}
		close(lines)
	}()
	var buildID string
	select {
	case id, ok := <-lines:
		if !ok {
			cmd.Wait()
			t.Fatal("crash helper ended without starting its build")
		}
		buildID = id
	case <-time.After(3 * time.Minute):
		t.Fatal("crash helper did not start its build within 3 minutes")
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	killed = true
	return buildID
}

// processesRootedIn returns the PIDs of processes whose root directory
// lies below dir (build steps a crash left running).
func processesRootedIn(dir string) []int {
	var pids []int
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		root, err := os.Readlink(filepath.Join("/proc", p.Name(), "root"))
		if err == nil && strings.HasPrefix(root, dir+"/") {
			pids = append(pids, pid)
		}
	}
	return pids
}

// unmountAllBelow is the tests' own safety net: whatever a failing test
// left mounted below dir goes before t.TempDir's removal.
func unmountAllBelow(t *testing.T, dir string) {
	t.Cleanup(func() {
		for _, pid := range processesRootedIn(dir) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		ms, _ := mountsBelow(dir)
		for _, m := range ms {
			unix.Unmount(m, unix.MNT_DETACH)
		}
	})
}

// TestCrashLeftoversRemoved kills a process mid-build (its RUN step
// blocked on a mounted overlay, an upload half written), adds the
// leftovers older versions' layouts left, and checks that the next start
// (New + Service.Recover) unmounts and removes all of it, keeps what ready
// builds use, and that a ready template still builds from the cache.
func TestCrashLeftoversRemoved(t *testing.T) {
	needRoot(t)
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t, tinyRootFS(t))
	unmountAllBelow(t, f.dir)

	// A ready template with sleep in it, the crashed build's base.
	ctxDir := t.TempDir()
	sleep, err := os.ReadFile("/usr/bin/sleep")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(ctxDir, "sleep"), sleep, 0o755)
	spec := Spec{ContextDir: ctxDir, Steps: []Step{
		{Type: StepCopy, Args: []string{"sleep", "/bin/sleep"}},
		{Type: StepRun, Args: []string{"echo kept > /kept.txt"}},
	}}
	ready, err := f.build(t, "team", "app", spec)
	if err != nil {
		t.Fatalf("build: %v\n%s", err, f.logs(t, ready.ID))
	}
	base, err := f.cat.Resolve(ctx, "", "base")
	if err != nil {
		t.Fatal(err)
	}
	f.svc.Close() // the first process's clean exit; the second one crashes

	crashed := startCrashedBuild(t, f.dir)
	work := filepath.Join(f.dir, "builder", "work")
	mounts, err := mountsBelow(work)
	if err != nil || len(mounts) == 0 {
		t.Fatalf("the crashed build left no mount below %s (%v): nothing to test", work, err)
	}

	// Leftovers of older versions' layouts, made as they made them.
	legacy := filepath.Join(work, "step-legacy")
	os.Mkdir(legacy, 0o700)
	if _, err := layer.MountOverlay([]string{base.RootFS}, legacy); err != nil {
		t.Fatal(err)
	}
	outside := t.TempDir()
	os.WriteFile(filepath.Join(outside, "precious"), []byte("x"), 0o644)
	os.Symlink(outside, filepath.Join(legacy, "escape"))
	keys, _ := os.ReadDir(filepath.Join(f.dir, "builder", "layers"))
	if len(keys) == 0 {
		t.Fatal("no layer cache entries")
	}
	keyDir := filepath.Join(f.dir, "builder", "layers", keys[0].Name())
	partials := []string{
		filepath.Join(keyDir, "diff.pulling.abcd1234"),
		filepath.Join(keyDir, "diff.old.abcd1234"),
		filepath.Join(keyDir, "state.json.tmp.abcd1234"),
		filepath.Join(f.dir, "builder", "files", "sometemplate", ".upload-123"),
		filepath.Join(f.cat.BuildDir(ready.ID), "rootfs.unpacking"),
	}
	for _, p := range partials {
		os.MkdirAll(filepath.Dir(p), 0o700)
		if strings.Contains(p, "diff.") || strings.HasSuffix(p, "unpacking") {
			os.MkdirAll(filepath.Join(p, "etc"), 0o755)
		} else {
			os.WriteFile(p, []byte("half"), 0o600)
		}
	}
	partials = append(partials, filepath.Join(f.dir, "templates", "base", "rootfs.tar.tmp"))
	os.MkdirAll(filepath.Dir(partials[len(partials)-1]), 0o755)
	os.WriteFile(partials[len(partials)-1], []byte("half a tar"), 0o644)
	crashedBuildDir := f.cat.BuildDir(crashed)
	os.MkdirAll(filepath.Join(crashedBuildDir, "rootfs.partial", "etc"), 0o755)

	// A live builder of another process is left alone: one of this
	// process stands for it (a flock is per open file).
	live, err := New(Config{DataDir: filepath.Join(f.dir, "builder"), Catalog: f.cat, Runner: ChrootRunner{}})
	if err != nil {
		t.Fatal(err)
	}
	liveScratch, err := live.scratchDir("step-")
	if err != nil {
		t.Fatal(err)
	}
	liveMount, err := layer.MountOverlay([]string{base.RootFS}, liveScratch)
	if err != nil {
		t.Fatal(err)
	}

	// The next start.
	var logs syncBuffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	b2, err := New(Config{DataDir: filepath.Join(f.dir, "builder"), Catalog: f.cat, Runner: ChrootRunner{}, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	svc2, err := NewService(ServiceConfig{Builder: b2, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc2.Close)
	if err := svc2.Recover(ctx); err != nil {
		t.Fatal(err)
	}

	t.Run("logged and counted", func(t *testing.T) {
		// Three mounts (the crashed RUN step's overlay and the scratch
		// file system under it, the legacy overlay), two scratch
		// directories (the crashed session, the legacy step), six partial
		// files (mmdebstrap's tar among them), the crashed build's
		// directory.
		want := "unmounted=3 scratch_dirs=2 partial_files=6 failed_build_dirs=1 kept=0"
		if !strings.Contains(logs.String(), "build leftovers of a previous run removed") || !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks the summary %q:\n%s", want, logs.String())
		}
		if !strings.Contains(logs.String(), "build leftover unmounted") {
			t.Errorf("log lacks the unmounts:\n%s", logs.String())
		}
	})
	t.Run("crashed build failed and its files gone", func(t *testing.T) {
		bd, err := f.cat.Build(ctx, crashed)
		if err != nil || bd.Status != templates.BuildError {
			t.Fatalf("crashed build: %+v, %v", bd, err)
		}
		if _, err := os.Lstat(crashedBuildDir); err == nil {
			t.Errorf("%s is still there", crashedBuildDir)
		}
	})
	t.Run("mounts", func(t *testing.T) {
		left, err := mountsBelow(work)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(left, []string{liveMount.Merged}) {
			t.Errorf("mounts below the work directory: %v, want only the live builder's %s", left, liveMount.Merged)
		}
	})
	t.Run("work directory", func(t *testing.T) {
		entries, _ := os.ReadDir(work)
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		want := []string{filepath.Base(b2.sess.dir), filepath.Base(b2.sess.dir) + lockSuffix,
			filepath.Base(live.sess.dir), filepath.Base(live.sess.dir) + lockSuffix}
		slices.Sort(names)
		slices.Sort(want)
		if !slices.Equal(names, want) {
			t.Errorf("work directory holds %v, want the two live sessions %v", names, want)
		}
		if got := readFile(t, outside, "precious"); got != "x" {
			t.Errorf("a file behind a symbolic link out of the work directory changed: %q", got)
		}
	})
	t.Run("partial files", func(t *testing.T) {
		for _, p := range partials {
			if _, err := os.Lstat(p); err == nil {
				t.Errorf("%s is still there", p)
			}
		}
	})
	t.Run("no process left", func(t *testing.T) {
		if pids := processesRootedIn(f.dir); len(pids) > 0 {
			t.Errorf("processes of the crashed build still run: %v", pids)
		}
	})
	t.Run("ready builds intact", func(t *testing.T) {
		if got := readFile(t, ready.RootFSDir, "kept.txt"); got != "kept\n" {
			t.Errorf("ready template's file: %q", got)
		}
		if _, err := os.Stat(filepath.Join(base.RootFS, "bin/sh")); err != nil {
			t.Errorf("base template: %v", err)
		}
		// The ready template builds again from the cache.
		f2 := &fixture{cat: f.cat, b: b2, svc: svc2, dir: f.dir}
		again, err := f2.build(t, "team", "app", spec)
		if err != nil {
			t.Fatalf("rebuild: %v\n%s", err, f2.logs(t, again.ID))
		}
		logs := f2.logs(t, again.ID)
		for _, want := range []string{"CACHED [1] COPY", "CACHED [2] RUN"} {
			if !strings.Contains(logs, want) {
				t.Errorf("rebuild logs lack %q:\n%s", want, logs)
			}
		}
		if got := readFile(t, again.RootFSDir, "kept.txt"); got != "kept\n" {
			t.Errorf("rebuilt template's file: %q", got)
		}
	})
	t.Run("live builder closes", func(t *testing.T) {
		if err := liveMount.Unmount(); err != nil {
			t.Fatal(err)
		}
		dir := live.sess.dir
		if err := live.Close(); err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{dir, dir + lockSuffix} {
			if _, err := os.Lstat(p); err == nil {
				t.Errorf("%s of a closed session is still there", p)
			}
		}
	})
}

func TestMountsBelow(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in, want string
	}{
		{`/a/b`, "/a/b"},
		{`/a/with\040space`, "/a/with space"},
		{`/a/back\134slash`, `/a/back\slash`},
		{`/a/trailing\04`, `/a/trailing\04`},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			t.Parallel()
			if got := mountinfo.Unescape(tc.in); got != tc.want {
				t.Errorf("unescape(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
	t.Run("nested deepest first", func(t *testing.T) {
		needRoot(t)
		t.Parallel()
		dir := t.TempDir()
		unmountAllBelow(t, dir)
		lower := t.TempDir()
		outer, err := layer.MountOverlay([]string{lower}, filepath.Join(dir, "a"))
		if err != nil {
			t.Fatal(err)
		}
		inner := filepath.Join(outer.Merged, "deeper", "x")
		os.MkdirAll(inner, 0o755)
		if err := unix.Mount("tmpfs", inner, "tmpfs", 0, "size=1m"); err != nil {
			t.Fatal(err)
		}
		got, err := mountsBelow(dir)
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{inner, outer.Merged}; !slices.Equal(got, want) {
			t.Fatalf("mountsBelow = %v, want %v", got, want)
		}
		// A busy mount goes lazily.
		fd, err := os.Open(inner)
		if err != nil {
			t.Fatal(err)
		}
		defer fd.Close()
		for _, m := range got {
			if _, err := unmountBelow(dir, m); err != nil {
				t.Fatal(err)
			}
		}
		if left, _ := mountsBelow(dir); len(left) > 0 {
			t.Errorf("still mounted: %v", left)
		}
	})
	t.Run("symbolic link refused", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		target := t.TempDir()
		os.Symlink(target, filepath.Join(dir, "link"))
		if _, err := unmountBelow(dir, filepath.Join(dir, "link", "m")); err == nil {
			t.Error("unmount through a symbolic link was not refused")
		}
		if _, err := unmountBelow(dir, "/elsewhere/m"); err == nil {
			t.Error("unmount outside the root was not refused")
		}
	})
}

// syncBuffer is a bytes.Buffer safe for concurrent writes (a logger's).
type syncBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
