package lifecycle_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/lifecycle"
	"github.com/warren-sandbox/warren/internal/lifecycle/fakenode"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/sandbox"
	"github.com/warren-sandbox/warren/internal/store"
	"github.com/warren-sandbox/warren/internal/store/storetest"
)

// logBuf collects JSON log lines; Reset forgets what came before an action.
type logBuf struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuf) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuf) Reset() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.Reset()
}

// lines returns the decoded log lines that name sandbox id.
func (b *logBuf) lines(t *testing.T, id string) []map[string]any {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	for l := range strings.SplitSeq(strings.TrimSpace(b.buf.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		if m["sandbox_id"] == id {
			out = append(out, m)
		}
	}
	return out
}

// TestKillPaths checks docs/lifecycle.md §1 for every kill path of the
// control plane: the reason is on the killed event (with execution data),
// on sandbox_killed_total{kill_reason} and on every log line naming the
// sandbox from the moment the kill starts.
func TestKillPaths(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tests := []struct {
		reason sandbox.KillReason
		params lifecycle.CreateParams
		// kill makes the sandbox die on this path.
		kill func(t *testing.T, h *harness, sb *store.Sandbox)
	}{
		{sandbox.KillRequest, lifecycle.CreateParams{Timeout: time.Hour}, func(t *testing.T, h *harness, sb *store.Sandbox) {
			if err := h.m.Kill(ctx, "team", sb.ID, sandbox.KillRequest); err != nil {
				t.Fatal(err)
			}
		}},
		{sandbox.KillAdmin, lifecycle.CreateParams{Timeout: time.Hour}, func(t *testing.T, h *harness, sb *store.Sandbox) {
			if err := h.m.Kill(ctx, "", sb.ID, sandbox.KillAdmin); err != nil {
				t.Fatal(err)
			}
		}},
		{sandbox.KillTimeout, lifecycle.CreateParams{Timeout: 10 * time.Second}, func(t *testing.T, h *harness, sb *store.Sandbox) {
			time.Sleep(11 * time.Second)
		}},
		{sandbox.KillOOM, lifecycle.CreateParams{Timeout: time.Hour}, func(t *testing.T, h *harness, sb *store.Sandbox) {
			h.node.Exit(sb.ID, sandbox.KillOOM)
		}},
		{sandbox.KillExited, lifecycle.CreateParams{Timeout: time.Hour}, func(t *testing.T, h *harness, sb *store.Sandbox) {
			h.node.Exit(sb.ID, "")
		}},
		{sandbox.KillTTLBackstop, lifecycle.CreateParams{Timeout: time.Hour}, func(t *testing.T, h *harness, sb *store.Sandbox) {
			h.node.Kill(ctx, sb.ID, sandbox.KillTTLBackstop)
			h.node.Emit(nodeapi.Event{Type: nodeapi.EventKilled, SandboxID: sb.ID, ExecutionID: sb.Spec.ExecutionID, Reason: sandbox.KillTTLBackstop, At: time.Now()})
		}},
		{sandbox.KillResumeFailed, lifecycle.CreateParams{Timeout: time.Hour}, func(t *testing.T, h *harness, sb *store.Sandbox) {
			if err := h.m.Pause(ctx, "team", sb.ID, true); err != nil {
				t.Fatal(err)
			}
			h.logs.Reset()
			h.node.ResumeErr = errdefs.ErrNotFound
			if _, err := h.m.Resume(ctx, "team", sb.ID, time.Minute, nil); !errdefs.IsNotFound(err) {
				t.Fatalf("resume: %v", err)
			}
		}},
		{sandbox.KillNodeLost, lifecycle.CreateParams{Timeout: time.Hour}, func(t *testing.T, h *harness, sb *store.Sandbox) {
			h.node.Kill(ctx, sb.ID, sandbox.KillRequest) // the node forgets it behind our back
			h.logs.Reset()
			if err := h.m.Reconcile(ctx); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.reason.String(), func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				logs := &logBuf{}
				h := start(t, storetest.SQLite(t), fakenode.New(), func(c *lifecycle.Config) {
					c.Logger = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
				})
				h.logs = logs
				sb := h.create(tc.params)
				logs.Reset()
				tc.kill(t, h, sb)
				synctest.Wait()
				h.wantState(sb.ID, sandbox.StateKilled, tc.reason)
				if n := h.killed(tc.reason.String()); n != 1 {
					t.Fatalf("sandbox_killed_total{kill_reason=%s} = %v, want 1", tc.reason, n)
				}
				evs, err := h.st.QueryEvents(ctx, store.EventFilter{SandboxID: sb.ID, Types: []string{store.EventKilled}})
				if err != nil || len(evs) != 1 {
					t.Fatalf("killed events: %v %v", evs, err)
				}
				e := evs[0]
				if e.Reason != tc.reason || e.Data.KillReason != tc.reason.String() || e.TeamID != "team" || e.TemplateID != "base" || e.ExecutionID == "" {
					t.Fatalf("killed event %+v data %+v", e, e.Data)
				}
				lines := logs.lines(t, sb.ID)
				if len(lines) == 0 {
					t.Fatal("no log line names the sandbox on its kill path")
				}
				for _, l := range lines {
					if l["kill_reason"] != tc.reason.String() {
						t.Errorf("log line without kill_reason=%s: %v", tc.reason, l)
					}
				}
			})
		})
	}
}

// TestStaleExecution checks that an action meant for one execution never
// hits its resumed successor: a late exit of the first execution, after a
// pause and resume, leaves the new execution running.
func TestStaleExecution(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		h := start(t, storetest.SQLite(t), fakenode.New(), nil)
		sb := h.create(lifecycle.CreateParams{Timeout: time.Hour})
		old := sb.Spec.ExecutionID
		if err := h.m.Pause(ctx, "team", sb.ID, true); err != nil {
			t.Fatal(err)
		}
		resumed, err := h.m.Resume(ctx, "team", sb.ID, time.Hour, nil)
		if err != nil {
			t.Fatal(err)
		}
		if resumed.Spec.ExecutionID == old || resumed.Spec.ExecutionID == "" {
			t.Fatalf("resume kept execution %q", old)
		}
		for _, typ := range []nodeapi.EventType{nodeapi.EventExited, nodeapi.EventKilled} {
			h.node.Emit(nodeapi.Event{Type: typ, SandboxID: sb.ID, ExecutionID: old, Reason: sandbox.KillTTLBackstop, At: time.Now()})
			synctest.Wait()
			h.wantState(sb.ID, sandbox.StateRunning, "")
		}
		// The current execution's event is applied.
		h.node.Emit(nodeapi.Event{Type: nodeapi.EventExited, SandboxID: sb.ID, ExecutionID: resumed.Spec.ExecutionID, Reason: sandbox.KillOOM, At: time.Now()})
		synctest.Wait()
		h.wantState(sb.ID, sandbox.StateKilled, sandbox.KillOOM)
		evs, _ := h.st.ListEvents(ctx, sb.ID)
		var types []string
		for _, e := range evs {
			types = append(types, e.Type)
		}
		if got := strings.Join(types, ","); got != "created,paused,resumed,killed" {
			t.Fatalf("events %s", got)
		}
		if evs[3].ExecutionID != resumed.Spec.ExecutionID || evs[0].ExecutionID != old || evs[1].Data.Execution == nil {
			t.Fatalf("event execution IDs: %+v", evs)
		}
	})
}

// TestEvictorKillNamesExecution: the evictor's timeout kill names the
// execution it was armed for; a node that runs another execution of the
// sandbox refuses it, and nothing is recorded as killed.
func TestEvictorKillNamesExecution(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		n := fakenode.New()
		h := start(t, storetest.SQLite(t), n, nil)
		sb := h.create(lifecycle.CreateParams{Timeout: 10 * time.Second})
		// The node now runs an execution the store does not know.
		n.Put(&nodeapi.Sandbox{ID: sb.ID, ExecutionID: "successor", State: sandbox.StateRunning})
		time.Sleep(11 * time.Second)
		synctest.Wait()
		h.wantState(sb.ID, sandbox.StateRunning, "")
		if _, err := n.Get(ctx, sb.ID); err != nil {
			t.Fatalf("the successor execution was killed: %v", err)
		}
		if got := h.killed("timeout"); got != 0 {
			t.Fatalf("sandbox_killed_total{kill_reason=timeout} = %v after a refused kill", got)
		}
		if err := h.m.Pause(ctx, "team", sb.ID, true); !errdefs.IsConflict(err) {
			t.Fatalf("pause naming the old execution: %v, want conflict", err)
		}
	})
}

// TestEventKinds checks the events of the non-kill transitions: their
// types, IDs and data.
func TestEventKinds(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		h := start(t, storetest.SQLite(t), fakenode.New(), nil)
		sb := h.create(lifecycle.CreateParams{Timeout: time.Minute, Metadata: map[string]string{"k": "v"},
			Template: nodeapi.Template{ID: "base", BuildID: "b7"}, Resources: sandbox.Resources{VCPUs: 2, MemoryMB: 512}})
		if err := h.m.SetTimeout(ctx, "team", sb.ID, 5*time.Minute); err != nil {
			t.Fatal(err)
		}
		if err := h.m.Checkpointed(ctx, "team", sb.ID, "snap:v1"); err != nil {
			t.Fatal(err)
		}
		res, err := h.m.Fork(ctx, "team", sb.ID, 2, time.Minute, 0)
		if err != nil || len(res) != 2 || res[0].Err != nil || res[1].Err != nil {
			t.Fatalf("fork: %+v %v", res, err)
		}
		time.Sleep(30 * time.Second)
		if err := h.m.Pause(ctx, "team", sb.ID, true); err != nil {
			t.Fatal(err)
		}
		evs, _ := h.st.ListEvents(ctx, sb.ID)
		var types []string
		for _, e := range evs {
			types = append(types, e.Type)
			if e.TeamID != "team" || e.TemplateID != "base" || e.BuildID != "b7" || e.ExecutionID != sb.Spec.ExecutionID || e.Data.Metadata["k"] != "v" {
				t.Errorf("event %s: %+v data %+v", e.Type, e, e.Data)
			}
		}
		if got := strings.Join(types, ","); got != "created,updated,checkpointed,forked,paused" {
			t.Fatalf("events %s", got)
		}
		if evs[1].Data.EndAt == nil || evs[2].Data.SnapshotID != "snap:v1" || len(evs[3].Data.ForkIDs) != 2 {
			t.Fatalf("event data: updated %+v checkpointed %+v forked %+v", evs[1].Data, evs[2].Data, evs[3].Data)
		}
		x := evs[4].Data.Execution
		if x == nil || x.VCPUCount != 2 || x.MemoryMB != 512 || x.ExecutionTime != 30000 || evs[4].Data.PausedWithMemory == nil {
			t.Fatalf("paused execution data %+v", evs[4].Data)
		}
		child, _ := h.st.ListEvents(ctx, res[0].Sandbox.ID)
		if len(child) != 1 || child[0].Type != store.EventCreated || child[0].Data.SourceSandboxID != sb.ID {
			t.Fatalf("fork child events %+v", child)
		}
	})
}

// TestOrphanKill: a sandbox the node runs but the store does not know is
// killed as orphaned; with no store row there is no event, so the metric
// and every log line naming it carry the reason.
func TestOrphanKill(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		logs := &logBuf{}
		n := fakenode.New()
		n.Put(&nodeapi.Sandbox{ID: "orphan", State: sandbox.StateRunning})
		h := start(t, storetest.SQLite(t), n, func(c *lifecycle.Config) {
			c.Logger = slog.New(slog.NewJSONHandler(logs, nil))
		})
		if _, err := n.Get(context.Background(), "orphan"); !errdefs.IsNotFound(err) {
			t.Fatalf("orphan still on the node: %v", err)
		}
		if got := h.killed("orphaned"); got != 1 {
			t.Fatalf("sandbox_killed_total{kill_reason=orphaned} = %v, want 1", got)
		}
		lines := logs.lines(t, "orphan")
		if len(lines) == 0 {
			t.Fatal("no log line names the orphan")
		}
		for _, l := range lines {
			if l["kill_reason"] != "orphaned" {
				t.Errorf("log line without kill_reason=orphaned: %v", l)
			}
		}
	})
}

// TestKillWhileStarting checks docs/lifecycle.md §1 for a kill that comes
// while the node starts the sandbox, on both create paths: the kill
// succeeds, the create fails with a conflict, and the reason is on the
// stored row, its killed event, sandbox_killed_total and every log line
// naming the sandbox from the kill on; nothing is left on the node. A
// create of one store write also asks its node to kill with that reason.
func TestKillWhileStarting(t *testing.T) {
	t.Parallel()
	for _, allNodes := range []bool{false, true} {
		t.Run(fmt.Sprintf("all nodes %t", allNodes), func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				ctx := context.Background()
				logs := &logBuf{}
				h := start(t, storetest.SQLite(t), fakenode.New(), func(c *lifecycle.Config) {
					c.AllNodes = allNodes
					c.Logger = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
				})
				var id string
				h.node.BeforeCreate = func(req nodeapi.CreateRequest) {
					id = req.ID
					logs.Reset()
					if err := h.m.Kill(ctx, "", req.ID, sandbox.KillAdmin); err != nil {
						t.Errorf("kill while starting: %v", err)
					}
				}
				_, err := h.m.Create(ctx, lifecycle.CreateParams{TeamID: "team", Template: nodeapi.Template{ID: "base"}, Timeout: time.Hour})
				if !errdefs.IsConflict(err) {
					t.Fatalf("create killed while starting: %v, want a conflict", err)
				}
				synctest.Wait()
				h.wantState(id, sandbox.StateKilled, sandbox.KillAdmin)
				if n := h.killed(sandbox.KillAdmin.String()); n != 1 {
					t.Fatalf("sandbox_killed_total{kill_reason=admin} = %v, want 1", n)
				}
				evs, err := h.st.QueryEvents(ctx, store.EventFilter{SandboxID: id, Types: []string{store.EventKilled}})
				if err != nil || len(evs) != 1 || evs[0].Reason != sandbox.KillAdmin {
					t.Fatalf("killed events: %+v, %v; want one, admin", evs, err)
				}
				if h.onNode(id) {
					t.Fatal("sandbox killed while starting still on the node")
				}
				if !allNodes && !slices.Contains(h.node.Calls(), "kill "+id+" admin") {
					t.Errorf("node not asked to kill with the reason: %v", h.node.Calls())
				}
				lines := logs.lines(t, id)
				if len(lines) == 0 {
					t.Fatal("no log line names the sandbox killed while starting")
				}
				for _, l := range lines {
					if l["kill_reason"] != sandbox.KillAdmin.String() {
						t.Errorf("log line without kill_reason=admin: %v", l)
					}
				}
			})
		})
	}
}
