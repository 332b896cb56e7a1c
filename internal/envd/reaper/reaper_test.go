//go:build linux

package reaper

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/warren-sandbox/warren/internal/testenv"
)

func startCmd(cmd *exec.Cmd) StartFunc {
	return func() (int, error) {
		if err := cmd.Start(); err != nil {
			return 0, err
		}
		return cmd.Process.Pid, nil
	}
}

func TestDirect(t *testing.T) {
	t.Parallel()
	ch, err := Direct{}.Spawn(startCmd(exec.Command("/bin/sh", "-c", "exit 4")))
	if err != nil {
		t.Fatal(err)
	}
	if ws := <-ch; ws.ExitStatus() != 4 {
		t.Fatalf("status %v", ws)
	}
}

// TestReaperReapsOrphans makes the test process a subreaper so orphans
// come to it, as they would to PID 1, and checks that the Reaper both
// delivers its own children's statuses and leaves no zombie behind.
// It is not parallel: the reaper waits for every child of the process.
func TestReaperReapsOrphans(t *testing.T) {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Skipf("no subreaper: %v", err)
	}
	defer func() { _ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0) }()
	r := New(testenv.Logger(t))
	var orphans atomic.Int32
	r.reaped = func(int) { orphans.Add(1) }
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go r.Run(ctx)

	// Many children that exit immediately, each leaving an orphan behind.
	const n = 20
	var chans []<-chan unix.WaitStatus
	for i := 0; i < n; i++ {
		ch, err := r.Spawn(startCmd(exec.Command("/bin/sh", "-c", fmt.Sprintf("(sleep 0.05 &) ; exit %d", i%7))))
		if err != nil {
			t.Fatal(err)
		}
		chans = append(chans, ch)
	}
	for i, ch := range chans {
		select {
		case ws := <-ch:
			if ws.ExitStatus() != i%7 {
				t.Fatalf("child %d: status %d", i, ws.ExitStatus())
			}
		case <-time.After(time.Minute):
			t.Fatalf("child %d: no status", i)
		}
	}
	deadline := time.Now().Add(time.Minute)
	for orphans.Load() < n && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if orphans.Load() < n {
		t.Fatalf("reaped %d orphans, want %d", orphans.Load(), n)
	}
	if z := zombies(t); len(z) > 0 {
		t.Fatalf("zombies left: %v", z)
	}
}

func zombies(t *testing.T) []int {
	t.Helper()
	me := os.Getpid()
	des, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, de := range des {
		pid, err := strconv.Atoi(de.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + de.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) > 1 && f[0] == "Z" && f[1] == strconv.Itoa(me) {
			out = append(out, pid)
		}
	}
	return out
}

// orphanStream is a fake wait4 of a PID 1 under a fork bomb: wait4(-1)
// hands out orphans without end (until stop), in the kernel's order, in
// which the waited children come last (gVisor's is random, so they may);
// wait4(pid) reaps a child that has exited.
type orphanStream struct {
	mu     sync.Mutex
	exited map[int]unix.WaitStatus
	next   int
	stop   atomic.Bool
}

func (o *orphanStream) wait(pid int, ws *unix.WaitStatus, _ int) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if pid > 0 {
		st, ok := o.exited[pid]
		if !ok {
			return 0, nil
		}
		delete(o.exited, pid)
		*ws = st
		return pid, nil
	}
	if o.stop.Load() {
		for p, st := range o.exited {
			delete(o.exited, p)
			*ws = st
			return p, nil
		}
		return 0, nil
	}
	o.next++
	return 100000 + o.next, nil
}

// TestReaperUnderOrphanStream: while orphans keep coming (a fork bomb's),
// a waited child's status arrives and a new Spawn goes through. Reaping
// the stream first under one lock held all along starves both.
func TestReaperUnderOrphanStream(t *testing.T) {
	t.Parallel()
	o := &orphanStream{exited: map[int]unix.WaitStatus{}}
	r := New(testenv.Logger(t))
	r.wait = o.wait
	var orphans atomic.Int64
	r.reaped = func(int) { orphans.Add(1) }
	defer o.stop.Store(true)
	ch, err := r.Spawn(func() (int, error) { return 42, nil })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go r.Run(ctx)
	o.mu.Lock()
	o.exited[42] = unix.WaitStatus(3 << 8) // exit status 3
	o.mu.Unlock()
	_ = unix.Kill(os.Getpid(), unix.SIGCHLD) // wake the reaper

	select {
	case ws := <-ch:
		if ws.ExitStatus() != 3 {
			t.Fatalf("status %v, want exit 3", ws)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("no status for the waited child after %d orphans", orphans.Load())
	}
	spawned := make(chan error, 1)
	go func() {
		_, err := r.Spawn(func() (int, error) { return 43, nil })
		spawned <- err
	}()
	select {
	case err := <-spawned:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Spawn blocked by the orphan stream")
	}
	if orphans.Load() == 0 {
		t.Fatal("no orphan reaped")
	}
}
