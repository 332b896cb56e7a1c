package lifecycle_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/lifecycle"
	"github.com/warren-sandbox/warren/internal/lifecycle/fakenode"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/sandbox"
	"github.com/warren-sandbox/warren/internal/store"
	"github.com/warren-sandbox/warren/internal/store/storetest"
)

// writeStore counts the sandbox writes made through it; when hang is set,
// RecordSandbox signals entered and then never reaches the store until
// release is closed, as in a process that died before its write.
type writeStore struct {
	store.Store
	writes  atomic.Int32
	hang    bool
	entered chan struct{}
	release chan struct{}
}

func (s *writeStore) CreateSandbox(ctx context.Context, sb *store.Sandbox) error {
	s.writes.Add(1)
	return s.Store.CreateSandbox(ctx, sb)
}

func (s *writeStore) CreateSandboxWithin(ctx context.Context, sb *store.Sandbox, limit int, states ...sandbox.State) error {
	s.writes.Add(1)
	return s.Store.CreateSandboxWithin(ctx, sb, limit, states...)
}

func (s *writeStore) RecordSandbox(ctx context.Context, sb *store.Sandbox, ev *store.Event, limit int, states ...sandbox.State) error {
	s.writes.Add(1)
	if s.hang {
		close(s.entered)
		<-s.release
		return errors.New("the process is gone")
	}
	return s.Store.RecordSandbox(ctx, sb, ev, limit, states...)
}

func (s *writeStore) TransitionSandbox(ctx context.Context, id string, fn func(*store.Sandbox) (*store.Event, error)) (*store.Sandbox, error) {
	s.writes.Add(1)
	return s.Store.TransitionSandbox(ctx, id, fn)
}

func (s *writeStore) UpdateSandbox(ctx context.Context, id string, fn func(*store.Sandbox) error) (*store.Sandbox, error) {
	s.writes.Add(1)
	return s.Store.UpdateSandbox(ctx, id, fn)
}

func newManager(t *testing.T, st store.Store, n *fakenode.Node) *lifecycle.Manager {
	t.Helper()
	m, err := lifecycle.New(lifecycle.Config{Store: st, Node: n, Registry: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestCreateOneWrite: a create of a one-node Manager writes the store
// once, after the node answers, and the row it writes is the running
// sandbox with its created event.
func TestCreateOneWrite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := &writeStore{Store: storetest.SQLite(t)}
	m := newManager(t, st, fakenode.New())
	sb, err := m.Create(ctx, lifecycle.CreateParams{TeamID: "team", Template: nodeapi.Template{ID: "base"}, Timeout: time.Hour, MaxConcurrent: 5})
	if err != nil {
		t.Fatal(err)
	}
	if n := st.writes.Load(); n != 1 {
		t.Fatalf("create made %d store writes, want 1", n)
	}
	got, err := st.GetSandbox(ctx, sb.ID)
	if err != nil || got.State != sandbox.StateRunning || got.Spec.EnvdVersion == "" {
		t.Fatalf("stored sandbox %+v, %v: want running with its envd version", got, err)
	}
	evs, err := st.ListEvents(ctx, sb.ID)
	if err != nil || len(evs) != 1 || evs[0].Type != store.EventCreated {
		t.Fatalf("events %+v, %v: want one created event", evs, err)
	}
}

// TestCreateCrashBeforeWrite: a process that dies after the node started
// the sandbox and before its one store write leaves a node sandbox
// without a row; the next Manager's Reconcile kills it as an orphan.
func TestCreateCrashBeforeWrite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sql, n := storetest.SQLite(t), fakenode.New()
	dying := &writeStore{Store: sql, hang: true, entered: make(chan struct{}), release: make(chan struct{})}
	m1 := newManager(t, dying, n)
	done := make(chan error, 1)
	go func() {
		_, err := m1.Create(ctx, lifecycle.CreateParams{TeamID: "team", Template: nodeapi.Template{ID: "base"}, Timeout: time.Hour})
		done <- err
	}()
	<-dying.entered // the node runs it; the row is never written
	listed, err := n.List(ctx)
	if err != nil || len(listed) != 1 {
		t.Fatalf("node sandboxes %v, %v: want the one started", listed, err)
	}
	id := listed[0].ID
	restarted := newManager(t, sql, n)
	if err := restarted.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Get(ctx, id); !errdefs.IsNotFound(err) {
		t.Fatalf("sandbox %s of the dead create still on the node: %v", id, err)
	}
	if got, err := sql.GetSandbox(ctx, id); !errdefs.IsNotFound(err) {
		t.Fatalf("store has %+v, %v for the dead create, want no row", got, err)
	}
	close(dying.release)
	if err := <-done; err == nil {
		t.Fatal("create whose write failed succeeded")
	}
}

// TestCreateLimitCountsStarting: creates whose node call is in progress
// (no row yet) hold their team's concurrency slots.
func TestCreateLimitCountsStarting(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	n := fakenode.New()
	m := newManager(t, storetest.SQLite(t), n)
	p := lifecycle.CreateParams{TeamID: "team", Template: nodeapi.Template{ID: "base"}, Timeout: time.Hour, MaxConcurrent: 2}
	var entered sync.WaitGroup
	entered.Add(2)
	release := make(chan struct{})
	n.BeforeCreate = func(nodeapi.CreateRequest) { entered.Done(); <-release }
	errs := make(chan error, 2)
	for range 2 {
		go func() { _, err := m.Create(ctx, p); errs <- err }()
	}
	entered.Wait()
	n.BeforeCreate = nil
	var le *lifecycle.LimitError
	if _, err := m.Create(ctx, p); !errors.As(err, &le) {
		t.Fatalf("third create while two start: %v, want a limit error", err)
	}
	close(release)
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if _, err := m.Create(ctx, p); !errors.As(err, &le) {
		t.Fatalf("third create after two started: %v, want a limit error", err)
	}
}

// TestCreateExitWhileStarting: a node's exit event for a sandbox whose one
// store write has not happened yet is not lost: the row is stored killed
// with the event's reason, and Create fails.
func TestCreateExitWhileStarting(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h := start(t, storetest.SQLite(t), fakenode.New(), nil)
		var id string
		h.node.BeforeCreate = func(req nodeapi.CreateRequest) {
			id = req.ID
			h.node.Emit(nodeapi.Event{Type: nodeapi.EventExited, SandboxID: req.ID, ExecutionID: req.ExecutionID, Reason: sandbox.KillOOM, At: time.Now()})
			synctest.Wait()
		}
		_, err := h.m.Create(context.Background(), lifecycle.CreateParams{TeamID: "team", Template: nodeapi.Template{ID: "base"}, Timeout: time.Hour})
		if !errdefs.IsConflict(err) {
			t.Fatalf("create that exited while starting: %v, want a conflict", err)
		}
		h.wantState(id, sandbox.StateKilled, sandbox.KillOOM)
		if h.onNode(id) {
			t.Fatal("sandbox that exited while starting still on the node")
		}
		if n := h.killed(sandbox.KillOOM.String()); n != 1 {
			t.Fatalf("sandbox_killed_total{kill_reason=oom} = %v, want 1", n)
		}
	})
}

// heldEndNode is a fake node whose first SetEndTime waits for release,
// after signalling entered.
type heldEndNode struct {
	*fakenode.Node
	calls            atomic.Int32
	entered, release chan struct{}
}

func (n *heldEndNode) SetEndTime(ctx context.Context, id string, at time.Time) error {
	if n.calls.Add(1) == 1 {
		close(n.entered)
		<-n.release
	}
	return n.Node.SetEndTime(ctx, id, at)
}

// TestCreateSlotGivenBackAtWrite: a create's concurrency slot passes to
// its row at the one store write, not when Create returns, so a create
// whose row is stored while another is still being answered (here its
// node's SetEndTime) is not counted twice against a third's write.
func TestCreateSlotGivenBackAtWrite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fn := fakenode.New()
	fn.IgnoreTimeout = true // so the create sends SetEndTime after its write
	n := &heldEndNode{Node: fn, entered: make(chan struct{}), release: make(chan struct{})}
	var creates atomic.Int32
	bEntered, bRelease := make(chan struct{}), make(chan struct{})
	fn.BeforeCreate = func(nodeapi.CreateRequest) {
		if creates.Add(1) == 1 {
			close(bEntered)
			<-bRelease
		}
	}
	m, err := lifecycle.New(lifecycle.Config{Store: storetest.SQLite(t), Node: n})
	if err != nil {
		t.Fatal(err)
	}
	p := lifecycle.CreateParams{TeamID: "team", Template: nodeapi.Template{ID: "base"}, Timeout: time.Hour, MaxConcurrent: 2}
	errB := make(chan error, 1)
	go func() { _, err := m.Create(ctx, p); errB <- err }()
	<-bEntered // b is admitted and on its node
	errA := make(chan error, 1)
	go func() { _, err := m.Create(ctx, p); errA <- err }()
	<-n.entered // a's row is stored; its create has not returned
	close(bRelease)
	if err := <-errB; err != nil {
		t.Errorf("second create within the limit of 2: %v", err)
	}
	close(n.release)
	if err := <-errA; err != nil {
		t.Fatal(err)
	}
}
