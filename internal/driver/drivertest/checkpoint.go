package drivertest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/warren-sandbox/warren/internal/driver"
	"github.com/warren-sandbox/warren/internal/sandbox"
)

func (s *suite) checkpointer(t *testing.T) driver.Checkpointer {
	t.Helper()
	c, ok := s.h.Driver.(driver.Checkpointer)
	if !s.h.Driver.Capabilities().MemoryCheckpoint {
		t.Skip("the driver does not advertise MemoryCheckpoint")
	}
	if !ok {
		t.Fatal("Capabilities().MemoryCheckpoint is set but the driver does not implement driver.Checkpointer")
	}
	return c
}

// memState is what a counterInit sandbox holds in memory: its boot token,
// its count, and a file on its tmpfs.
type memState struct {
	token string
	count int
	file  string
}

// prepare starts a counterInit sandbox, lets it count and writes a file on
// its tmpfs and one on its root filesystem.
func (s *suite) prepare(t *testing.T) (driver.Spec, memState) {
	t.Helper()
	sp := s.spec(t, SpecOptions{}, counterInit...)
	s.start(t, sp)
	if s.h.Simulated {
		return sp, memState{}
	}
	st := memState{file: sandbox.RandomToken(8)}
	s.sh(t, sp.ID, "echo "+st.file+" > /tmp/marker && echo "+st.file+" > /root/marker")
	st.token, st.count = s.waitCounter(t, sp.ID, 5)
	return sp, st
}

// checkRestored checks that sandbox id continues the memory state st: the
// same boot token, a count not below the checkpointed one that keeps
// counting, the tmpfs file and the root filesystem file.
func (s *suite) checkRestored(t *testing.T, id string, st memState) {
	t.Helper()
	s.wantState(t, id, driver.StateRunning)
	if s.h.Simulated {
		return
	}
	tok, n := s.counter(t, id)
	if tok != st.token {
		t.Errorf("%s: boot token %q, want %q: init started afresh instead of continuing", id, tok, st.token)
	}
	if n < st.count {
		t.Errorf("%s: counter %d below the checkpointed %d", id, n, st.count)
	}
	s.waitCounter(t, id, n+2)
	want := st.file + "\n"
	if got := s.sh(t, id, "cat /tmp/marker"); got != want {
		t.Errorf("%s: /tmp/marker = %q, want %q", id, got, want)
	}
	if got := s.sh(t, id, "cat /root/marker"); got != want {
		t.Errorf("%s: /root/marker = %q, want %q", id, got, want)
	}
}

func imageDir(t *testing.T) string {
	dir := filepath.Join(t.TempDir(), "image")
	return dir
}

func (s *suite) testCheckpointRestore(t *testing.T) {
	c := s.checkpointer(t)
	ctx := ctxT(t)
	src, st := s.prepare(t)
	dir := imageDir(t)
	if err := c.Checkpoint(ctx, src.ID, dir, driver.CheckpointOptions{}); err != nil {
		t.Fatalf("Checkpoint: %v", err)
	}
	if ents, err := os.ReadDir(dir); err != nil || len(ents) == 0 {
		t.Fatalf("checkpoint dir %s holds %d entries (%v)", dir, len(ents), err)
	}
	s.wantState(t, src.ID, driver.StateStopped)
	s.waitExit(t, src.ID)

	dst := s.h.NewSpec(t, SpecOptions{CloneFrom: &src})
	dst.Init = src.Init
	if err := c.Restore(ctx, dst, dir); err != nil {
		t.Fatalf("Restore under a new ID: %v", err)
	}
	s.cleanup(t, dst.ID)
	s.checkRestored(t, dst.ID, st)
}

func (s *suite) testRestoreSameID(t *testing.T) {
	c := s.checkpointer(t)
	ctx := ctxT(t)
	src, st := s.prepare(t)
	dir := imageDir(t)
	// Checkpoint a frozen sandbox (the pause path of a warm-pool member).
	if f, ok := s.h.Driver.(driver.Freezer); ok && s.h.Driver.Capabilities().Freeze {
		if err := f.Freeze(ctx, src.ID); err != nil {
			t.Fatalf("Freeze: %v", err)
		}
	}
	if err := c.Checkpoint(ctx, src.ID, dir, driver.CheckpointOptions{}); err != nil {
		t.Fatalf("Checkpoint: %v", err)
	}
	if err := s.h.Driver.Delete(ctx, src.ID); err != nil {
		t.Fatalf("Delete after checkpoint: %v", err)
	}
	again := s.h.NewSpec(t, SpecOptions{ID: src.ID, CloneFrom: &src})
	again.Init = src.Init
	if err := c.Restore(ctx, again, dir); err != nil {
		t.Fatalf("Restore under the same ID: %v", err)
	}
	s.checkRestored(t, again.ID, st)
}

func (s *suite) testFork(t *testing.T) {
	c := s.checkpointer(t)
	ctx := ctxT(t)
	src, st := s.prepare(t)
	dir := imageDir(t)
	// A consistent fork: freeze the source, write its memory image, copy
	// its writable layer for each child, thaw it.
	f, canFreeze := s.h.Driver.(driver.Freezer)
	canFreeze = canFreeze && s.h.Driver.Capabilities().Freeze
	if canFreeze {
		if err := f.Freeze(ctx, src.ID); err != nil {
			t.Fatalf("Freeze: %v", err)
		}
	}
	if err := c.Checkpoint(ctx, src.ID, dir, driver.CheckpointOptions{LeaveRunning: true}); err != nil {
		t.Fatalf("Checkpoint(LeaveRunning): %v", err)
	}
	var specs []driver.Spec
	for range 2 {
		sp := s.h.NewSpec(t, SpecOptions{CloneFrom: &src})
		sp.Init = src.Init
		specs = append(specs, sp)
	}
	if canFreeze {
		if err := f.Thaw(ctx, src.ID); err != nil {
			t.Fatalf("Thaw: %v", err)
		}
	}
	s.wantState(t, src.ID, driver.StateRunning)

	var kids []string
	for _, sp := range specs {
		if err := c.Restore(ctx, sp, dir); err != nil {
			t.Fatalf("Restore fork child: %v", err)
		}
		s.cleanup(t, sp.ID)
		kids = append(kids, sp.ID)
	}
	for _, id := range kids {
		s.checkRestored(t, id, st)
	}
	if s.h.Simulated {
		return
	}
	// The source keeps its own memory and counts on.
	if tok, _ := s.counter(t, src.ID); tok != st.token {
		t.Errorf("source token changed to %q", tok)
	}
	// Children are independent: a file one writes is not in the other or
	// in the source, on tmpfs or on the root filesystem.
	s.sh(t, kids[0], "echo mine > /tmp/only && echo mine > /root/only")
	for _, id := range []string{kids[1], src.ID} {
		if out := s.sh(t, id, "cat /tmp/only /root/only 2>/dev/null || echo absent"); out != "absent\n" {
			t.Errorf("%s sees %s's files: %q", id, kids[0], out)
		}
	}
	if err := s.h.Driver.Kill(ctx, kids[0]); err != nil {
		t.Fatal(err)
	}
	s.waitExit(t, kids[0])
	s.wantState(t, kids[1], driver.StateRunning)
	s.wantState(t, src.ID, driver.StateRunning)
}
