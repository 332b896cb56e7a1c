package process

import (
	"context"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	pb "github.com/warren-sandbox/warren/api/envd/process"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/testenv"
)

// waitGone waits until none of pids is alive (zombies count as gone).
func waitGone(t *testing.T, what string, pids []int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for _, p := range pids {
		for alive(p) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if alive(p) {
			t.Fatalf("%s: process %d survived", what, p)
		}
	}
}

func sigkill(pid uint32) *connect.Request[pb.SendSignalRequest] {
	return connect.NewRequest(&pb.SendSignalRequest{
		Process: &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: pid}}, Signal: pb.Signal_SIGNAL_SIGKILL,
	})
}

// TestSignalAfterLeaderExit: a command whose first process exited while
// the processes it started live on (as a fork bomb's does) is still
// killed by its pid, group and all; once the group is gone its pid is
// not found.
func TestSignalAfterLeaderExit(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := env.run(t, ctx, &pb.StartRequest{
		Process: bash("sleep 1000 >/dev/null & echo $!; sleep 1000 >/dev/null & echo $!"), Stdin: noStdin()}, "")
	if err != nil {
		t.Fatal(err)
	}
	if r.end == nil || r.end.GetExitCode() != 0 {
		t.Fatalf("leader: end %v", r.end)
	}
	var children []int
	for _, f := range strings.Fields(r.stdout.String()) {
		n, _ := strconv.Atoi(f)
		children = append(children, n)
	}
	if len(children) != 2 || !alive(children[0]) || !alive(children[1]) {
		t.Fatalf("children %q not running", r.stdout.String())
	}
	t.Cleanup(func() { _ = unix.Kill(-int(r.pid), unix.SIGKILL) })
	if _, err := env.client.SendSignal(ctx, sigkill(r.pid)); err != nil {
		t.Fatalf("kill after the leader exited: %v", err)
	}
	waitGone(t, "kill after the leader exited", children)
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := env.client.SendSignal(ctx, sigkill(r.pid))
		if connect.CodeOf(err) == connect.CodeNotFound {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("kill of an emptied group: %v, want not found", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSignalReusedPid: an ended process whose pid now belongs to another
// process (its group is gone) is not found; the other process lives.
func TestSignalReusedPid(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := env.run(t, ctx, &pb.StartRequest{Process: bash("exit 0"), Stdin: noStdin()}, "")
	if err != nil || r.end == nil {
		t.Fatalf("run: %v %v", r, err)
	}
	p, err := env.mgr.get(r.pid)
	if err != nil {
		t.Fatal(err)
	}
	// Stand-in for a reuse: point the ended process at a live process
	// that leads its own group.
	other := exec.Command("sleep", "1000")
	other.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Process.Kill(); _ = other.Wait() })
	p.pid = uint32(other.Process.Pid)
	if err := p.signal(unix.SIGKILL); !errdefs.IsNotFound(err) {
		t.Fatalf("signal to a reused pid: %v, want not found", err)
	}
	if !alive(other.Process.Pid) {
		t.Fatal("the process that reused the pid was killed")
	}
}

// TestSignalUser: every process of one user ends with one request;
// another user's process lives. It runs the processes under an unused uid
// of the host (kill(-1) as that uid reaches nothing else). That a user
// without processes is not found is gVisor's answer (Linux's kill(-1)
// succeeds whenever any process exists): e2e/envd checks it.
func TestSignalUser(t *testing.T) {
	t.Parallel()
	testenv.Require(t, os.Geteuid() == 0, "needs root (processes under another uid)")
	uid := uint32(3_000_000 + rand.IntN(1_000_000))
	var pids []int
	var cmds []*exec.Cmd
	for range 3 {
		c := exec.Command("/bin/sh", "-c", "sleep 1000 & sleep 1000")
		c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}, Setsid: true}
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		pid := c.Process.Pid
		pids = append(pids, pid)
		cmds = append(cmds, c)
		t.Cleanup(func() { _ = unix.Kill(-pid, unix.SIGKILL) })
	}
	mine := exec.Command("sleep", "1000")
	if err := mine.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mine.Process.Kill(); _ = mine.Wait() })
	if err := signalUser(uid, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for _, c := range cmds {
		_ = c.Wait() // the zombie of our child is a process of the user until then
	}
	waitGone(t, "signal of the user's processes", pids)
	if !alive(mine.Process.Pid) {
		t.Fatal("another user's process was killed")
	}
	// Every process, as root, only as the sandbox's init.
	if err := signalUser(0, unix.SIGKILL); err == nil {
		t.Fatal("signal to every process outside a sandbox was not refused")
	}
}
