package builder

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/warren-sandbox/warren/internal/builder/driverrun"
	"github.com/warren-sandbox/warren/internal/driver/runc"
	"github.com/warren-sandbox/warren/internal/testenv"
)

// runcRunner is the build runner of `--driver runc`: driverrun over the
// runc driver (for a single trusted operator: runc shares the host's
// kernel), with a cgroup root and state of the test's own.
func runcRunner(t *testing.T) (driverrun.Runner, *runc.Driver) {
	t.Helper()
	needRoot(t)
	bin, err := exec.LookPath("runc")
	testenv.Require(t, err == nil, "runc is not installed")
	envd := testenv.Envd(t)
	d, err := runc.New(runc.Config{Path: bin, StateDir: filepath.Join(t.TempDir(), "runc"), CgroupRoot: "/" + testCgroupRoot(t)})
	if err != nil {
		t.Fatal(err)
	}
	return driverrun.Runner{Driver: d, Init: envd, InitArgs: []string{"-listen", "127.0.0.1", "-no-port-forward"}}, d
}

// TestDriverRunnerRunc builds with steps in real runc containers.
func TestDriverRunnerRunc(t *testing.T) {
	r, d := runcRunner(t)
	t.Parallel()
	f := newFixtureWith(t, tinyRootFS(t), r)
	bd, err := f.build(t, "team", "runc", Spec{
		FromTemplate: "base",
		Steps: []Step{
			{Type: StepEnv, Args: []string{"MSG", "in a container"}},
			// A PID namespace of its own (PID 1 is the sandbox's init, not
			// the host's); /proc mounted.
			{Type: StepRun, Args: []string{`cat /proc/1/cmdline > /pid1.txt; echo "$MSG" > /msg.txt`}},
			{Type: StepUser, Args: []string{"builder"}},
			{Type: StepRun, Args: []string{`echo mine > $HOME/mine.txt`}},
		},
		StartCmd: `echo started > $HOME/started; exec cat`,
		ReadyCmd: `test -f $HOME/started`,
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, f.logs(t, bd.ID))
	}
	if got := readFile(t, bd.RootFSDir, "pid1.txt"); !strings.HasPrefix(got, "/"+driverrun.InitDir+"/init\x00") {
		t.Errorf("PID 1 of the RUN step is %q, want the build sandbox's init", got)
	}
	if got := readFile(t, bd.RootFSDir, "msg.txt"); got != "in a container\n" {
		t.Errorf("RUN saw MSG %q", got)
	}
	if uid, _, _ := owner(t, filepath.Join(bd.RootFSDir, "home/builder/mine.txt")); uid != 1000 {
		t.Errorf("RUN as builder wrote as uid %d", uid)
	}
	if _, err := os.Lstat(filepath.Join(bd.RootFSDir, "home/builder/started")); err == nil {
		t.Errorf("the start command's writes leaked into the template")
	}
	if _, err := os.Lstat(filepath.Join(bd.RootFSDir, driverrun.InitDir)); err == nil {
		t.Errorf("the init mount point was left in the template")
	}
	logs := f.logs(t, bd.ID)
	if !strings.Contains(logs, "Ready command passed") {
		t.Errorf("logs:\n%s", logs)
	}
	t.Run("failing RUN", func(t *testing.T) {
		_, err := f.build(t, "team", "runc-fail", Spec{FromTemplate: "base", Steps: []Step{{Type: StepRun, Args: []string{"echo nope >&2; exit 7"}}}})
		se, ok := err.(*StepError)
		if !ok || se.ExitCode != 7 || !strings.Contains(se.Output, "nope") {
			t.Fatalf("err = %#v", err)
		}
	})
	if ids, err := d.List(context.Background()); err != nil || len(ids) != 0 {
		t.Errorf("containers left behind: %v, %v", ids, err)
	}
}

// TestDriverRunnerRuncRealBase builds on the real base root filesystem
// ($WARREN_TEST_ROOTFS_TAR): python, sudo as the default user.
func TestDriverRunnerRuncRealBase(t *testing.T) {
	r, _ := runcRunner(t)
	tarPath := testenv.RootFSTar(t)
	base, err := os.ReadFile(tarPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Parallel()
	f := newFixtureWith(t, base, r)
	base = nil
	bd, err := f.build(t, "team", "py", Spec{
		FromTemplate: "base",
		Steps: []Step{
			{Type: StepRun, Args: []string{`python -c "import sys; print(sys.version_info[0])" > /py.txt`}},
			{Type: StepUser, Args: []string{"user"}},
			{Type: StepRun, Args: []string{`sudo -n id -u > /home/user/sudo.txt && id -un >> /home/user/sudo.txt`}},
		},
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, f.logs(t, bd.ID))
	}
	if got := readFile(t, bd.RootFSDir, "py.txt"); got != "3\n" {
		t.Errorf("python printed %q", got)
	}
	if got := readFile(t, bd.RootFSDir, "home/user/sudo.txt"); got != "0\nuser\n" {
		t.Errorf("sudo as user: %q", got)
	}
	nt, err := f.cat.Resolve(context.Background(), "team", "py")
	if err != nil || nt.User != "user" || nt.Workdir != "/home/user" {
		t.Errorf("Resolve = %+v, %v", nt, err)
	}
}
