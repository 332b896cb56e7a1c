package builder

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/warren-sandbox/warren/internal/testenv"
)

func needRunc(t *testing.T) RuncRunner {
	t.Helper()
	needRoot(t)
	_, err := exec.LookPath("runc")
	testenv.Require(t, err == nil, "runc is not installed")
	return RuncRunner{StateDir: filepath.Join(t.TempDir(), "runc")}
}

// TestRuncRunner builds with steps in real runc containers.
func TestRuncRunner(t *testing.T) {
	r := needRunc(t)
	t.Parallel()
	f := newFixtureWith(t, tinyRootFS(t), r)
	bd, err := f.build(t, "team", "runc", Spec{
		FromTemplate: "base",
		Steps: []Step{
			{Type: StepEnv, Args: []string{"MSG", "in a container"}},
			// PID 1 in its own PID namespace; /proc mounted.
			{Type: StepRun, Args: []string{`echo "$$ $MSG" > /pid1.txt; test -d /proc/self`}},
			{Type: StepUser, Args: []string{"builder"}},
			{Type: StepRun, Args: []string{`echo mine > $HOME/mine.txt`}},
		},
		StartCmd: `echo started > /tmp/started; exec cat`,
		ReadyCmd: `test -f /tmp/started`,
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, f.logs(t, bd.ID))
	}
	if got := readFile(t, bd.RootFSDir, "pid1.txt"); got != "1 in a container\n" {
		t.Errorf("RUN output %q, want PID 1 and the env", got)
	}
	if uid, _, _ := owner(t, filepath.Join(bd.RootFSDir, "home/builder/mine.txt")); uid != 1000 {
		t.Errorf("RUN as builder wrote as uid %d", uid)
	}
	if _, err := os.Stat(filepath.Join(bd.RootFSDir, "tmp/started")); err == nil {
		t.Errorf("the ready check's writes leaked into the template")
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
	out, _ := exec.Command("runc", "--root", r.StateDir, "list", "-q").Output()
	if strings.TrimSpace(string(out)) != "" {
		t.Errorf("containers left behind: %s", out)
	}
}

// TestRuncRunnerRealBase builds on the real base root filesystem
// ($WARREN_TEST_ROOTFS_TAR): python, sudo as the default user.
func TestRuncRunnerRealBase(t *testing.T) {
	r := needRunc(t)
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
