package fake

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/warren-sandbox/warren/internal/driver"
	"github.com/warren-sandbox/warren/internal/errdefs"
)

func spec(id string) driver.Spec {
	return driver.Spec{ID: id, Init: driver.Process{Args: []string{"/envd"}}}
}

func TestScriptedExits(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		beh   Behavior
		execs int
		want  driver.Exit
	}{
		{name: "exit after duration", beh: Behavior{ExitAfter: time.Minute, ExitCode: 3}, want: driver.Exit{Code: 3}},
		{name: "oom after duration", beh: Behavior{ExitAfter: time.Second, OOM: true}, want: driver.Exit{Code: 137, Signaled: true, OOM: true}},
		{name: "exit after execs", beh: Behavior{ExitAfterExecs: 2, ExitCode: 9}, execs: 2, want: driver.Exit{Code: 9}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				ctx := t.Context()
				d := New(Config{Default: tt.beh})
				if err := d.Start(ctx, spec("a")); err != nil {
					t.Fatal(err)
				}
				for range tt.execs {
					if _, err := d.Exec(ctx, "a", driver.Process{Args: []string{"true"}}); err != nil {
						t.Fatal(err)
					}
				}
				start := time.Now()
				got, err := d.Wait(ctx, "a")
				if err != nil {
					t.Fatal(err)
				}
				if tt.beh.ExitAfter > 0 && time.Since(start) != tt.beh.ExitAfter {
					t.Errorf("exit after %v, want %v", time.Since(start), tt.beh.ExitAfter)
				}
				got.At = time.Time{}
				if got != tt.want {
					t.Errorf("exit = %+v, want %+v", got, tt.want)
				}
				st, err := d.Status(ctx, "a")
				if err != nil || st.State != driver.StateStopped {
					t.Errorf("status = %+v, %v; want stopped", st, err)
				}
			})
		})
	}
}

func TestStartFailures(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	tests := []struct {
		name    string
		beh     Behavior
		timeout time.Duration
		id      string
		wantIs  error
	}{
		{name: "scripted error", beh: Behavior{StartErr: boom}, id: "a", wantIs: boom},
		{name: "hang until ctx ends", beh: Behavior{StartHang: true}, id: "a", timeout: time.Second, wantIs: context.DeadlineExceeded},
		{name: "delay longer than ctx", beh: Behavior{StartDelay: time.Hour}, id: "a", timeout: time.Second, wantIs: context.DeadlineExceeded},
		{name: "bad id", id: "A/B", wantIs: errdefs.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				ctx := t.Context()
				if tt.timeout > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, tt.timeout)
					defer cancel()
				}
				d := New(Config{Default: tt.beh})
				err := d.Start(ctx, spec(tt.id))
				if !errors.Is(err, tt.wantIs) {
					t.Fatalf("Start = %v, want %v", err, tt.wantIs)
				}
				if ids, _ := d.List(t.Context()); len(ids) != 0 {
					t.Errorf("List = %v after a failed start", ids)
				}
				if c := d.CallsOf("start"); len(c) != 1 || !errors.Is(c[0].Err, tt.wantIs) {
					t.Errorf("recorded start calls = %+v", c)
				}
			})
		})
	}
}

func TestLifecycle(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	var (
		mu  sync.Mutex
		got []string
	)
	d := New(Config{Default: Behavior{Exec: func(ctx context.Context, id string, p driver.Process) (int, error) {
		mu.Lock()
		got = append(got, id+":"+strings.Join(p.Args, " "))
		mu.Unlock()
		if p.Stdout != nil {
			fmt.Fprint(p.Stdout, "out")
		}
		return 4, nil
	}}})
	d.SetBehavior("b", Behavior{ExitCode: 5})

	if err := d.Start(ctx, spec("a")); err != nil {
		t.Fatal(err)
	}
	if err := d.Start(ctx, spec("a")); !errdefs.IsAlreadyExists(err) {
		t.Errorf("second Start = %v, want already exists", err)
	}
	var out strings.Builder
	code, err := d.Exec(ctx, "a", driver.Process{Args: []string{"echo", "hi"}, Stdout: &out})
	if err != nil || code != 4 || out.String() != "out" {
		t.Errorf("Exec = %d, %v, %q", code, err, out.String())
	}
	if _, err := d.Exec(ctx, "nope", driver.Process{Args: []string{"x"}}); !errdefs.IsNotFound(err) {
		t.Errorf("Exec on unknown = %v", err)
	}

	// Freeze refuses exec; thaw brings it back; both are idempotent.
	for range 2 {
		if err := d.Freeze(ctx, "a"); err != nil {
			t.Fatal(err)
		}
	}
	if st, _ := d.Status(ctx, "a"); st.State != driver.StateFrozen {
		t.Errorf("state = %s, want frozen", st.State)
	}
	if _, err := d.Exec(ctx, "a", driver.Process{Args: []string{"x"}}); !errdefs.IsConflict(err) {
		t.Errorf("Exec while frozen = %v, want conflict", err)
	}
	for range 2 {
		if err := d.Thaw(ctx, "a"); err != nil {
			t.Fatal(err)
		}
	}

	// The per-ID script applies to b, not to a.
	if err := d.Start(ctx, spec("b")); err != nil {
		t.Fatal(err)
	}
	if code, _ := d.Exec(ctx, "b", driver.Process{Args: []string{"x"}}); code != 0 {
		t.Errorf("b's exec code = %d, want 0 (own behaviour)", code)
	}
	if err := d.Exit("b", 5); err != nil {
		t.Fatal(err)
	}
	if e, _ := d.Wait(ctx, "b"); e.Code != 5 || e.OOM {
		t.Errorf("b exit = %+v", e)
	}
	if ids, _ := d.List(ctx); strings.Join(ids, ",") != "a,b" {
		t.Errorf("List = %v", ids)
	}

	if err := d.Kill(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if e, _ := d.Wait(ctx, "a"); e.Code != 137 || !e.Signaled {
		t.Errorf("a exit after kill = %+v", e)
	}
	for _, id := range []string{"a", "b", "a", "never"} {
		if err := d.Delete(ctx, id); err != nil {
			t.Errorf("Delete(%s) = %v", id, err)
		}
	}
	if ids, _ := d.List(ctx); len(ids) != 0 {
		t.Errorf("List after delete = %v", ids)
	}
	if _, err := d.Status(ctx, "a"); !errdefs.IsNotFound(err) {
		t.Errorf("Status after delete = %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || got[0] != "a:echo hi" {
		t.Errorf("exec handler saw %v", got)
	}
}

func TestCheckpointRestore(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	d := New(Config{})
	dir := filepath.Join(t.TempDir(), "ckpt")
	if err := d.Start(ctx, spec("src")); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := d.Exec(ctx, "src", driver.Process{Args: []string{"x"}, Stdout: io.Discard}); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Checkpoint(ctx, "src", dir, driver.CheckpointOptions{LeaveRunning: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, CheckpointFile)); err != nil {
		t.Fatalf("no image on disk: %v", err)
	}
	// Fork: two restores plus the source, all independent.
	for _, id := range []string{"c1", "c2"} {
		if err := d.Restore(ctx, spec(id), dir); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := d.Exec(ctx, "c1", driver.Process{Args: []string{"x"}}); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]int64{"src": 3, "c1": 4, "c2": 3} {
		if n, _ := d.Counter(id); n != want {
			t.Errorf("counter of %s = %d, want %d", id, n, want)
		}
	}
	// A checkpoint that does not leave the sandbox running stops it.
	if err := d.Checkpoint(ctx, "c1", filepath.Join(t.TempDir(), "c1"), driver.CheckpointOptions{}); err != nil {
		t.Fatal(err)
	}
	if st, _ := d.Status(ctx, "c1"); st.State != driver.StateStopped {
		t.Errorf("c1 after checkpoint is %s", st.State)
	}
	if err := d.Restore(ctx, spec("c3"), t.TempDir()); !errdefs.IsNotFound(err) {
		t.Errorf("Restore from empty dir = %v, want not found", err)
	}

	noCk := New(Config{Capabilities: &driver.Capabilities{}})
	if err := noCk.Start(ctx, spec("x")); err != nil {
		t.Fatal(err)
	}
	if err := noCk.Checkpoint(ctx, "x", dir, driver.CheckpointOptions{}); !errdefs.IsUnsupported(err) {
		t.Errorf("Checkpoint without capability = %v", err)
	}
	if err := noCk.Freeze(ctx, "x"); !errdefs.IsUnsupported(err) {
		t.Errorf("Freeze without capability = %v", err)
	}
}

// TestConcurrent exercises the driver from many goroutines (run with -race).
func TestConcurrent(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	d := New(Config{Default: Behavior{ExitAfterExecs: 50}})
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			id := fmt.Sprintf("s%d", i)
			if err := d.Start(ctx, spec(id)); err != nil {
				t.Error(err)
				return
			}
			for range 50 {
				_, _ = d.Exec(ctx, id, driver.Process{Args: []string{"x"}})
				_ = d.Freeze(ctx, id)
				_ = d.Thaw(ctx, id)
				_, _ = d.Status(ctx, id)
				_, _ = d.List(ctx)
			}
			_ = d.Kill(ctx, id)
			if _, err := d.Wait(ctx, id); err != nil {
				t.Error(err)
			}
			_ = d.Delete(ctx, id)
		})
	}
	wg.Wait()
	if ids, _ := d.List(ctx); len(ids) != 0 {
		t.Errorf("left: %v", ids)
	}
}
