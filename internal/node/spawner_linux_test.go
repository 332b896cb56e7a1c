package node

import (
	"os/exec"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Children started through the spawner with a parent-death signal survive
// goroutines that end their locked threads (as netns code does).
func TestSpawnerKeepsChildren(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("sleep"); err != nil {
		t.Skip("no sleep(1)")
	}
	s := newSpawner(2)
	var cmds []*exec.Cmd
	for range 10 {
		c := exec.Command("sleep", "60")
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		var err error
		if serr := s.do(func() { err = c.Start() }); serr != nil || err != nil {
			t.Fatal(serr, err)
		}
		cmds = append(cmds, c)
		t.Cleanup(func() {
			_ = c.Process.Kill()
			_ = c.Wait()
		})
	}
	// End many threads, as network namespace code does.
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			runtime.LockOSThread()
			time.Sleep(time.Millisecond)
		})
	}
	wg.Wait()
	// A killed child is reaped by Wait4 right away; a live one is not.
	deadline := time.Now().Add(500 * time.Millisecond)
	for time.Now().Before(deadline) {
		for _, c := range cmds {
			var ws syscall.WaitStatus
			if pid, _ := syscall.Wait4(c.Process.Pid, &ws, syscall.WNOHANG, nil); pid == c.Process.Pid {
				t.Fatalf("child %d died (%v) when another goroutine ended its thread", pid, ws)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.close()
	if err := s.do(func() {}); err == nil {
		t.Error("do after close succeeded")
	}
}
