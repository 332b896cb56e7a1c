package process

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	pb "github.com/warren-sandbox/warren/api/envd/process"
)

// TestOutputAfterTheEnd: a process a command left behind that writes to
// the command's output after its end event went out neither dies of
// SIGPIPE nor blocks: it writes every line (dropped by envd) and goes on.
// With the pipes closed at the end, its first write killed it (a fork
// bomb's processes die so at their first failed fork, and respawn).
func TestOutputAfterTheEnd(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	done := filepath.Join(dir, "done")
	script := `(trap 'echo sigpipe > ` + done + `; exit 1' PIPE
until [ -e ` + filepath.Join(dir, "go") + ` ]; do sleep 0.05; done
for i in $(seq 2000); do echo "line $i of the output nobody reads"; echo "and its stderr" >&2; done
echo wrote > ` + done + `) &
echo started`
	r, err := env.run(t, ctx, &pb.StartRequest{Process: bash(script), Stdin: noStdin()}, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Kill(-int(r.pid), unix.SIGKILL) })
	if r.end == nil || strings.TrimSpace(r.stdout.String()) != "started" {
		t.Fatalf("end %v, stdout %q", r.end, r.stdout.String())
	}
	// The end event is out: now the child writes (about 100 KiB, more
	// than a pipe holds).
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, err := os.ReadFile(done)
		if err == nil && strings.TrimSpace(string(b)) == "wrote" {
			return
		}
		if err == nil && strings.TrimSpace(string(b)) != "" {
			t.Fatalf("the left process: %q, want it to write all its output", b)
		}
		if time.Now().After(deadline) {
			t.Fatal("the left process did not finish writing in 30 s (blocked, or killed without a trace)")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
