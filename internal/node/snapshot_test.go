package node_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/warren-sandbox/warren/internal/driver"
	"github.com/warren-sandbox/warren/internal/driver/fake"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/node"
	"github.com/warren-sandbox/warren/internal/nodeapi"
)

func TestSnapshot(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, fake.Config{})
		a := e.start()
		ctx := context.Background()
		events, _ := a.Watch(t.Context())
		tmpl := createReq("x").Template
		dir := filepath.Join(t.TempDir(), "snapshot")

		// The ready command fails twice, then passes; meanwhile the start
		// command "writes" a file and "uses" memory.
		tries := 0
		e.envd.RunFunc = func(addr string, p node.EnvdProcess) (int, error) {
			tries++
			if tries < 3 {
				return 1, nil
			}
			for _, id := range e.layers.IDs() {
				if strings.HasPrefix(id, "snap") {
					e.layers.WriteFile(id, "/app/ready", "yes")
					_, _ = e.drv.Exec(ctx, id, driver.Process{Args: []string{"work"}})
				}
			}
			return 0, nil
		}
		start := time.Now()
		var listed int
		go func() {
			// While the snapshot sandbox runs it is not listed.
			time.Sleep(500 * time.Millisecond)
			l, _ := a.List(ctx)
			listed = len(l)
		}()
		if err := a.Snapshot(ctx, tmpl, "curl -f localhost:8000", dir); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if listed != 0 {
			t.Errorf("the snapshot sandbox was listed")
		}
		if tries != 3 || time.Since(start) != 2*time.Second {
			t.Errorf("ready command run %d times over %s, want 3 times, 1 s apart", tries, time.Since(start))
		}
		if runs := e.envd.Runs(); runs[0].Process.Args[2] != "curl -f localhost:8000" || runs[0].Process.User != "user" {
			t.Errorf("ready command call %+v", runs[0].Process)
		}
		if starts := e.envd.Starts(); len(starts) != 1 || starts[0].Process.Tag != "start-cmd" {
			t.Errorf("start command calls %+v", starts)
		}
		// The snapshot sandbox is gone; its memory and disk are kept.
		if ids := e.layers.IDs(); len(ids) != 0 {
			t.Errorf("layers left %v", ids)
		}
		if len(e.net.Live()) != 0 || len(e.cg.Names()) != 0 {
			t.Errorf("snapshot sandbox left slots %v cgroups %v", e.net.Live(), e.cg.Names())
		}
		if _, err := os.Stat(filepath.Join(dir, fake.CheckpointFile)); err != nil {
			t.Errorf("no memory image: %v", err)
		}
		saved := e.layers.Saved()
		if len(saved) != 1 {
			t.Fatalf("saved layers %v", saved)
		}
		var meta struct{ InitToken string }
		b, _ := os.ReadFile(filepath.Join(dir, "warren-snapshot.json"))
		_ = json.Unmarshal(b, &meta)

		// A sandbox of the template restores the snapshot.
		tmpl.SnapshotDir = dir
		sb := e.create(a, "sb1", func(r *nodeapi.CreateRequest) { r.Template = tmpl })
		if restores := e.fake.CallsOf("restore"); len(restores) != 1 || restores[0].Dir != dir || restores[0].ID != "sb1" {
			t.Errorf("restores %+v", restores)
		}
		if c, _ := e.fake.Counter("sb1"); c != 1 {
			t.Errorf("counter %d, want the snapshot's 1", c)
		}
		if ly, _ := e.layers.Get("sb1"); ly.Files["/app/ready"] != "yes" || !ly.Mounted {
			t.Errorf("layer of the restored sandbox %+v", ly)
		}
		inits := e.envd.Inits()
		if last := inits[len(inits)-1]; last.InitToken != meta.InitToken || meta.InitToken == "" || last.Addr != sb.Address {
			t.Errorf("init with token %q, want the snapshot's %q", last.InitToken, meta.InitToken)
		}
		if starts := e.envd.Starts(); len(starts) != 1 {
			t.Errorf("the start command ran again on restore: %+v", starts)
		}
		// A second sandbox gets its own copy.
		e.create(a, "sb2", func(r *nodeapi.CreateRequest) { r.Template = tmpl })
		e.layers.WriteFile("sb1", "/app/ready", "changed")
		if ly, _ := e.layers.Get("sb2"); ly.Files["/app/ready"] != "yes" {
			t.Errorf("sandboxes share the snapshot's layer")
		}
		if ev, ok := pollEvent(t, events); ok {
			t.Errorf("event about the snapshot sandbox: %+v", ev)
		}

		if err := a.DeleteSnapshot(ctx, dir); err != nil {
			t.Fatal(err)
		}
		if len(e.layers.Saved()) != 0 {
			t.Errorf("saved layer left: %v", e.layers.Saved())
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("snapshot dir left: %v", err)
		}
		if _, err := a.Create(ctx, createReq("sb3")); err != nil {
			t.Errorf("cold create after the snapshot is gone: %v", err)
		}
		a.Close()
	})
}

func TestSnapshotErrors(t *testing.T) {
	t.Parallel()
	t.Run("driver without checkpoint", func(t *testing.T) {
		e := newEnv(t, fake.Config{Capabilities: &driver.Capabilities{}})
		a := e.start()
		err := a.Snapshot(context.Background(), createReq("x").Template, "", t.TempDir())
		if !errdefs.IsUnsupported(err) {
			t.Errorf("snapshot: %v, want unsupported", err)
		}
	})
	t.Run("ready command never passes", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			e := newEnv(t, fake.Config{})
			e.envd.RunFunc = func(string, node.EnvdProcess) (int, error) { return 1, nil }
			a := e.start()
			dir := filepath.Join(t.TempDir(), "snap")
			if err := a.Snapshot(context.Background(), createReq("x").Template, "false", dir); err == nil {
				t.Fatal("snapshot with a failing ready command succeeded")
			}
			if ids := e.layers.IDs(); len(ids) != 0 || len(e.layers.Saved()) != 0 {
				t.Errorf("left layers %v saved %v", ids, e.layers.Saved())
			}
			a.Close()
		})
	})
	t.Run("not a snapshot", func(t *testing.T) {
		e := newEnv(t, fake.Config{})
		a := e.start()
		req := createReq("sb1")
		req.Template.SnapshotDir = t.TempDir()
		_, err := a.Create(context.Background(), req)
		if !errdefs.IsNotFound(err) {
			t.Errorf("create from a dir without a snapshot: %v, want not found", err)
		}
	})
}

// The source of a fork may be killed while its copies restore.
func TestForkSourceKilledDuringRestore(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, fake.Config{})
		a := e.start()
		ctx := context.Background()
		e.create(a, "src")
		_, _ = e.drv.Exec(ctx, "src", driver.Process{Args: []string{"tick"}})
		// More copies than restore at once: the last ones start after the
		// source is gone.
		ids := []string{"c1", "c2", "c3", "c4", "c5", "c6"}
		for _, id := range ids {
			e.fake.SetBehavior(id, fake.Behavior{StartDelay: 10 * time.Second})
		}
		done := make(chan error, 1)
		go func() {
			_, err := a.Fork(ctx, "src", nodeapi.ForkRequest{IDs: ids})
			done <- err
		}()
		time.Sleep(5 * time.Second) // the copies are restoring
		if err := a.Kill(ctx, "src", "request"); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatalf("fork with its source killed meanwhile: %v", err)
		}
		for _, id := range ids {
			if c, _ := e.fake.Counter(id); c != 1 {
				t.Errorf("%s counter %d, want 1", id, c)
			}
		}
		a.Close()
	})
}

// A running sandbox's snapshot (E2B's sandbox snapshots) restores as new
// sandboxes; the source keeps running.
func TestSnapshotSandbox(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fake.Config{})
	a := e.start()
	ctx := context.Background()
	e.create(a, "src")
	_, _ = e.drv.Exec(ctx, "src", driver.Process{Args: []string{"tick"}})
	e.layers.WriteFile("src", "f", "1")
	dir := filepath.Join(t.TempDir(), "snap")
	tmpl, err := a.SnapshotSandboxInto(ctx, "src", dir, false)
	if err != nil {
		t.Fatal(err)
	}
	if sb, _ := a.Get(ctx, "src"); sb.State != "running" {
		t.Errorf("source after snapshot: %+v", sb)
	}
	if st, _ := e.drv.Status(ctx, "src"); st.State != driver.StateRunning {
		t.Errorf("source runtime state %s, want running (thawed)", st.State)
	}
	tmpl.SnapshotDir = dir
	e.create(a, "copy", func(r *nodeapi.CreateRequest) { r.Template = tmpl })
	if c, _ := e.fake.Counter("copy"); c != 1 {
		t.Errorf("copy counter %d, want 1", c)
	}
	if ly, _ := e.layers.Get("copy"); ly.Files["f"] != "1" {
		t.Errorf("copy layer %+v", ly)
	}
	if _, err := a.SnapshotSandboxInto(ctx, "nope", dir, false); !errdefs.IsNotFound(err) {
		t.Errorf("snapshot of unknown: %v", err)
	}
	if err := a.DeleteSnapshot(ctx, dir); err != nil {
		t.Fatal(err)
	}
}
