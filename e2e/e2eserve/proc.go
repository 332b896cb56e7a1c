package e2eserve

import (
	"bufio"
	"os"
	"os/exec"
	"regexp"
	"syscall"
	"testing"
	"time"
)

// Proc is a process a test started (a warren role: api, node) and what it
// wrote to stderr.
type Proc struct {
	Name string
	Cmd  *exec.Cmd
	logs lockedWriter
	out  chan string   // stdout lines; dropped when nobody reads them
	done chan struct{} // closed when the process ended
}

// StartProc runs cmd with env added to the test process's environment.
// The test's end stops it (SIGTERM, SIGKILL after 30 s) if it still runs
// and logs its stderr, named name, when the test failed.
func StartProc(t testing.TB, name string, cmd *exec.Cmd, env ...string) *Proc {
	t.Helper()
	p := &Proc{Name: name, Cmd: cmd, out: make(chan string, 64), done: make(chan struct{})}
	p.Cmd.Env = append(os.Environ(), env...)
	p.Cmd.Stderr = &p.logs
	// A pipe of our own rather than StdoutPipe: Wait must return when the
	// process ends, though sandboxes it started may hold the pipe open.
	stdout, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	p.Cmd.Stdout = w
	err = p.Cmd.Start()
	w.Close()
	if err != nil {
		stdout.Close()
		t.Fatal(err)
	}
	go func() {
		defer close(p.out)
		defer stdout.Close()
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case p.out <- sc.Text():
			default:
			}
		}
	}()
	go func() {
		_ = p.Cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.Stop()
		if t.Failed() {
			t.Logf("%s (pid %d) log:\n%s", name, p.Cmd.Process.Pid, p.Logs())
		}
	})
	return p
}

// Logs returns what the process wrote to stderr so far.
func (p *Proc) Logs() string { return p.logs.String() }

// Stop ends the process with SIGTERM (SIGKILL after 30 s) unless it ended.
func (p *Proc) Stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		p.Kill()
	}
}

// Kill ends the process with SIGKILL and waits for it.
func (p *Proc) Kill() {
	_ = p.Cmd.Process.Kill()
	<-p.done
}

// Exports waits for the export lines (`export NAME=VALUE`) a warren role
// prints on stdout until it has each of names, and returns those it read;
// the process ending first, or 3 minutes passing, fails the test.
func (p *Proc) Exports(t testing.TB, names ...string) map[string]string {
	t.Helper()
	env := map[string]string{}
	re := regexp.MustCompile(`^export (\w+)=(\S+)$`)
	timeout := time.After(3 * time.Minute)
	for _, n := range names {
		for env[n] == "" {
			select {
			case l, ok := <-p.out:
				if !ok {
					t.Fatalf("%s exited before printing %s:\n%s", p.Name, n, p.Logs())
				}
				if m := re.FindStringSubmatch(l); m != nil {
					env[m[1]] = m[2]
				}
			case <-p.done:
				t.Fatalf("%s exited before printing %s:\n%s", p.Name, n, p.Logs())
			case <-timeout:
				t.Fatalf("%s printed no %s:\n%s", p.Name, n, p.Logs())
			}
		}
	}
	return env
}
