package builder

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/warren-sandbox/warren/internal/builder/driverrun"
	"github.com/warren-sandbox/warren/internal/driver/runsc"
)

// TestDriverRunnerRunsc builds with RUN steps and the ready check inside
// gVisor sandboxes (the runsc driver at $WARREN_RUNSC).
func TestDriverRunnerRunsc(t *testing.T) {
	needRoot(t)
	bin := os.Getenv("WARREN_RUNSC")
	if bin == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("WARREN_RUNSC is not set (CI=true)")
		}
		t.Skip("WARREN_RUNSC is not set (make build)")
	}
	if _, err := os.Stat(bin); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("WARREN_RUNSC: %v", err)
		}
		t.Skipf("WARREN_RUNSC: %v", err)
	}
	envd := os.Getenv("WARREN_ENVD")
	if _, err := os.Stat(envd); envd == "" || err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("WARREN_ENVD %q: %v (CI=true)", envd, err)
		}
		t.Skipf("WARREN_ENVD %q: %v (make build)", envd, err)
	}
	t.Parallel()
	// A cgroup root of its own (runsc's default is the node's "/warren"),
	// removed at the end in every hierarchy.
	cgRoot := "warren-test-bld-" + strconv.Itoa(os.Getpid())
	t.Cleanup(func() {
		dirs, _ := filepath.Glob("/sys/fs/cgroup/*/" + cgRoot)
		for _, d := range dirs {
			os.Remove(d)
		}
	})
	d, err := runsc.New(runsc.Config{Path: bin, StateDir: filepath.Join(t.TempDir(), "runsc"), CgroupRoot: "/" + cgRoot})
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
