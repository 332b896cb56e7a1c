package drivertest

import (
	"testing"

	"github.com/warren-sandbox/warren/internal/driver"
	"github.com/warren-sandbox/warren/internal/errdefs"
)

// preparer returns the driver's RestorePreparer, or skips: the interface
// is optional (a pause then releases everything and resumes the slow way).
func (s *suite) preparer(t *testing.T) driver.RestorePreparer {
	t.Helper()
	s.checkpointer(t)
	p, ok := s.h.Driver.(driver.RestorePreparer)
	if !ok {
		t.Skip("the driver does not implement driver.RestorePreparer")
	}
	return p
}

// checkpointAway checkpoints a prepared sandbox (prepare) and deletes it,
// as a pause with memory does, and returns a spec to bring it back under
// the same ID.
func (s *suite) checkpointAway(t *testing.T) (driver.Spec, memState, string) {
	t.Helper()
	c := s.checkpointer(t)
	ctx := ctxT(t)
	src, st := s.prepare(t)
	dir := imageDir(t)
	if err := c.Checkpoint(ctx, src.ID, dir, driver.CheckpointOptions{}); err != nil {
		t.Fatalf("Checkpoint: %v", err)
	}
	if err := s.h.Driver.Delete(ctx, src.ID); err != nil {
		t.Fatalf("Delete after checkpoint: %v", err)
	}
	again := s.h.NewSpec(t, SpecOptions{ID: src.ID, CloneFrom: &src})
	again.Init = src.Init
	return again, st, dir
}

// testRestorePrepared: a sandbox created ahead (PrepareRestore) takes the
// image and continues its memory state; the prepared sandbox is listed.
func (s *suite) testRestorePrepared(t *testing.T) {
	p := s.preparer(t)
	ctx := ctxT(t)
	again, st, dir := s.checkpointAway(t)
	if err := p.RestorePrepared(ctx, again.ID, dir); !errdefs.IsNotFound(err) {
		t.Errorf("RestorePrepared of a sandbox not prepared = %v, want not found", err)
	}
	if err := p.PrepareRestore(ctx, again); err != nil {
		t.Fatalf("PrepareRestore: %v", err)
	}
	listed, err := s.h.Driver.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !contains(listed, again.ID) {
		t.Errorf("List = %v, want the prepared %s", listed, again.ID)
	}
	if err := p.RestorePrepared(ctx, again.ID, dir); err != nil {
		t.Fatalf("RestorePrepared: %v", err)
	}
	s.checkRestored(t, again.ID, st)
	if err := s.h.Driver.Kill(ctx, again.ID); err != nil {
		t.Fatal(err)
	}
	if e := s.waitExit(t, again.ID); !e.Signaled {
		t.Errorf("exit after Kill of the restored sandbox = %+v, want signaled", e)
	}
}

// testPreparedDelete: a prepared sandbox that is never restored is
// removed by Kill (a no-op or a kill) and Delete, leaving nothing.
func (s *suite) testPreparedDelete(t *testing.T) {
	p := s.preparer(t)
	ctx := ctxT(t)
	again, _, _ := s.checkpointAway(t)
	if err := p.PrepareRestore(ctx, again); err != nil {
		t.Fatalf("PrepareRestore: %v", err)
	}
	if err := p.PrepareRestore(ctx, again); !errdefs.IsAlreadyExists(err) {
		t.Errorf("PrepareRestore twice = %v, want already exists", err)
	}
	if err := s.h.Driver.Kill(ctx, again.ID); err != nil {
		t.Errorf("Kill of a prepared sandbox: %v", err)
	}
	for range 2 {
		if err := s.h.Driver.Delete(ctx, again.ID); err != nil {
			t.Fatalf("Delete of a prepared sandbox: %v", err)
		}
	}
	if _, err := s.h.Driver.Status(ctx, again.ID); !errdefs.IsNotFound(err) {
		t.Errorf("Status after Delete = %v, want not found", err)
	}
	if listed, err := s.h.Driver.List(ctx); err != nil || contains(listed, again.ID) {
		t.Errorf("List after Delete = %v (%v), still has %s", listed, err, again.ID)
	}
	if s.h.Leftovers != nil {
		if left := s.h.Leftovers(t, []string{again.ID}); len(left) > 0 {
			t.Errorf("left behind after Delete of a prepared sandbox: %v", left)
		}
	}
}
