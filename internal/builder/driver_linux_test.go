package builder

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/warren-sandbox/warren/internal/builder/driverrun"
	"github.com/warren-sandbox/warren/internal/driver/runsc"
	"github.com/warren-sandbox/warren/internal/testenv"
)

// testCgroupRoot is a cgroup root of the test's own for a driver's build
// sandboxes (the drivers' default is the node's "/warren"), removed at the
// end in every hierarchy.
func testCgroupRoot(t testing.TB) string {
	cgRoot := testenv.Name("warren-test-bld-")
	t.Cleanup(func() {
		dirs, _ := filepath.Glob("/sys/fs/cgroup/*/" + cgRoot)
		dirs = append(dirs, "/sys/fs/cgroup/"+cgRoot)
		for _, d := range dirs {
			os.Remove(d)
		}
	})
	return cgRoot
}

// TestDriverRunnerRunsc builds with RUN steps and the ready check inside
// gVisor sandboxes (the runsc driver at $WARREN_RUNSC).
func TestDriverRunnerRunsc(t *testing.T) {
	needRoot(t)
	bin, envd := testenv.Runsc(t), testenv.Envd(t)
	t.Parallel()
	d, err := runsc.New(runsc.Config{Path: bin, StateDir: filepath.Join(t.TempDir(), "runsc"), CgroupRoot: "/" + testCgroupRoot(t)})
	if err != nil {
		t.Fatal(err)
	}
	f := newFixtureWith(t, tinyRootFS(t), driverrun.Runner{Driver: d, Init: envd, InitArgs: []string{"-listen", "127.0.0.1", "-no-port-forward"}})
	bd, err := f.build(t, "team", "gvisor", Spec{
		FromTemplate: "base",
		Steps: []Step{
			{Type: StepRun, Args: []string{"cat /proc/version > /kernel.txt"}},
			{Type: StepUser, Args: []string{"builder"}},
			{Type: StepRun, Args: []string{"echo mine > $HOME/mine.txt"}},
			{Type: StepRun, Args: []string{"echo bad; exit 5"}},
		},
	})
	if se, ok := err.(*StepError); !ok || se.Step != "4" || se.ExitCode != 5 || !strings.Contains(se.Output, "bad") {
		t.Fatalf("err = %v, want step 4 failing with exit 5\n%s", err, f.logs(t, bd.ID))
	}
	bd, err = f.build(t, "team", "gvisor", Spec{
		FromTemplate: "base",
		Steps: []Step{
			{Type: StepRun, Args: []string{"cat /proc/version > /kernel.txt"}},
			{Type: StepUser, Args: []string{"builder"}},
			{Type: StepRun, Args: []string{"echo mine > $HOME/mine.txt"}},
		},
		StartCmd: "echo up > /tmp/up",
		ReadyCmd: "test -f /tmp/up",
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, f.logs(t, bd.ID))
	}
	// gVisor's kernel answers /proc/version, not the host's.
	host, _ := os.ReadFile("/proc/version")
	if got := readFile(t, bd.RootFSDir, "kernel.txt"); got == string(host) || !strings.HasPrefix(got, "Linux version") {
		t.Errorf("RUN did not run in gVisor: /proc/version %q", got)
	}
	if uid, _, _ := owner(t, filepath.Join(bd.RootFSDir, "home/builder/mine.txt")); uid != 1000 {
		t.Errorf("RUN as builder wrote as uid %d", uid)
	}
	if _, err := os.Lstat(filepath.Join(bd.RootFSDir, driverrun.InitDir)); err == nil {
		t.Errorf("the init mount point was left in the template")
	}
	if ids, _ := d.List(t.Context()); len(ids) != 0 {
		t.Errorf("sandboxes left: %v", ids)
	}
}
