package lifecycle_test

import (
	"context"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/lifecycle"
	"github.com/warren-sandbox/warren/internal/lifecycle/fakenode"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/sandbox"
	"github.com/warren-sandbox/warren/internal/store"
	"github.com/warren-sandbox/warren/internal/store/storetest"
)

// recordedElsewhere is a node whose kills are recorded by another replica
// before the killer's own record: the other replica heard the node's exit
// event first (as in e2e TestReplicas).
type recordedElsewhere struct {
	*fakenode.Node
	other store.Store
}

func (n recordedElsewhere) Kill(ctx context.Context, id string, reason sandbox.KillReason) error {
	if err := n.Node.Kill(ctx, id, reason); err != nil {
		return err
	}
	_, err := n.other.TransitionSandbox(ctx, id, func(s *store.Sandbox) (*store.Event, error) {
		s.State, s.KillReason, s.KilledAt = sandbox.StateKilled, reason, time.Now().UTC()
		return &store.Event{SandboxID: s.ID, TeamID: s.TeamID, Type: store.EventKilled, Reason: reason}, nil
	})
	return err
}

// TestKillRecordedByAnotherReplica: a kill whose end another replica
// recorded first has still killed the sandbox: it succeeds (the SDK's
// kill answered false, a 404, before), and a second kill is not found.
func TestKillRecordedByAnotherReplica(t *testing.T) {
	t.Parallel()
	dsn := storetest.PostgresSchema(t)
	sa, sb := storetest.OpenPostgres(t, dsn), storetest.OpenPostgres(t, dsn)
	m := startReplica(t, sa, recordedElsewhere{Node: fakenode.New(), other: sb}).m
	ctx := context.Background()
	s, err := m.Create(ctx, lifecycle.CreateParams{TeamID: "team", Template: nodeapi.Template{ID: "base"}, Timeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Kill(ctx, "team", s.ID, sandbox.KillRequest); err != nil {
		t.Fatalf("kill recorded by another replica: %v, want success", err)
	}
	got, err := sa.GetSandbox(ctx, s.ID)
	if err != nil || got.State != sandbox.StateKilled {
		t.Fatalf("after the kill: %+v, %v; want killed", got, err)
	}
	if err := m.Kill(ctx, "team", s.ID, sandbox.KillRequest); err == nil {
		t.Fatal("second kill succeeded, want not found")
	}
}
