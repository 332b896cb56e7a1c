// Package drivertest is the conformance suite that every runtime driver
// passes: Run(t, h) starts real (or, for the fake, simulated) sandboxes
// through the driver.Driver interface and checks start, exec and its
// streams, exit codes, signals, Kill, Freeze/Thaw, Checkpoint/Restore, a
// restore into a sandbox made ahead (driver.RestorePreparer, where
// implemented), fork, memory and pids limits, and that Delete leaves
// nothing behind.
//
// Host is a ready-made harness half for OCI drivers: it unpacks the test
// root filesystem ($WARREN_TEST_ROOTFS_TAR) once per test binary and gives
// each sandbox an overlay of it, a bundle directory, a cgroup path and, on
// request, a network namespace with lo up.
//
// Workloads inside sandboxes are small shell loops from the Debian test
// root filesystem; the suite does not depend on envd. Subtests run one after
// another, with at most three sandboxes alive at once.
package drivertest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/driver"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/sandbox"
	"github.com/warren-sandbox/warren/internal/testenv"
)

// Harness connects the suite to one driver.
type Harness struct {
	// Driver is the driver under test.
	Driver driver.Driver
	// NewSpec returns the spec of a new sandbox: ID (opts.ID or a new unique
	// one), bundle dir, root filesystem, cgroup parent and, when
	// opts.Network is set, a network namespace; clean-up of what it made
	// is registered on t. The suite fills in Init and Resources.
	NewSpec func(t testing.TB, opts SpecOptions) driver.Spec
	// Simulated says the driver runs no processes (fake): the suite then
	// checks states and calls only, and skips what needs real processes.
	Simulated bool
	// Reopen, when set, returns a second driver on the same state, as a
	// restarted node agent would make; the suite checks that it finds,
	// drives and deletes the first one's sandboxes.
	Reopen func(t testing.TB) driver.Driver
	// Leftovers lists host objects the driver still holds for the given
	// sandboxes (runtime state, records, bundles, processes, cgroups);
	// nil means the suite only checks List and Status.
	Leftovers func(t *testing.T, ids []string) []string
	// HostPids, when set, is the host pids limit the driver sets for a
	// sandbox whose Resources.Pids is the argument (runsc: a wall above
	// the guest's own limit); nil means the two are equal.
	HostPids func(pids int64) int64
}

// SpecOptions ask NewSpec for a particular sandbox.
type SpecOptions struct {
	// ID, when set, is the sandbox's ID (restore under a known ID).
	ID string
	// Network asks for a network namespace (lo up).
	Network bool
	// CloneFrom is a spec whose root filesystem's writable layer the new
	// sandbox starts from (restore and fork need the files as they were at
	// the checkpoint).
	CloneFrom *driver.Spec
}

// NewID returns a unique sandbox ID for tests.
func NewID() string { return "dt-" + sandbox.NewID()[:12] }

// Require is testenv.Require, for the suite's callers: it skips the test
// with reason when ok is false, or fails it under CI=true.
func Require(t testing.TB, ok bool, reason string) {
	t.Helper()
	testenv.Require(t, ok, reason)
}

// timeout bounds every driver call of the suite: generous, for a loaded
// two-core machine.
const timeout = 2 * time.Minute

// Run runs the conformance suite against h.
func Run(t *testing.T, h Harness) {
	s := &suite{h: h}
	tests := []struct {
		name string
		fn   func(t *testing.T)
		real bool // needs real processes
	}{
		{"StartStatusList", s.testStartStatusList, false},
		{"StartTwiceFails", s.testStartTwice, false},
		{"BadInitLeavesNothing", s.testBadInit, true},
		{"ExecStreamsAndCodes", s.testExec, true},
		{"ExecUnknownSandbox", s.testExecUnknown, false},
		{"ExecHonoursContext", s.testExecContext, true},
		{"InitExitCode", s.testInitExit, true},
		{"SignalReachesInit", s.testSignal, true},
		{"Kill", s.testKill, false},
		{"KillWhileFrozen", s.testKillFrozen, false},
		{"WaitHonoursContext", s.testWaitContext, false},
		{"FreezeThaw", s.testFreezeThaw, false},
		{"CheckpointRestore", s.testCheckpointRestore, false},
		{"RestoreUnderSameID", s.testRestoreSameID, false},
		{"Fork", s.testFork, false},
		{"RestorePrepared", s.testRestorePrepared, false},
		{"PreparedDeleteLeavesNothing", s.testPreparedDelete, false},
		{"MemoryLimitOOM", s.testOOM, true},
		{"PidsLimitContainsForkBomb", s.testPids, true},
		{"Network", s.testNetwork, true},
		{"RecoverAfterRestart", s.testRecover, false},
		{"DeleteLeavesNothing", s.testDelete, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.real && h.Simulated {
				t.Skip("the driver is simulated: it runs no processes")
			}
			tt.fn(t)
		})
	}
}

type suite struct{ h Harness }

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	t.Cleanup(cancel)
	return ctx
}

// spec returns a new spec with init args.
func (s *suite) spec(t *testing.T, o SpecOptions, init ...string) driver.Spec {
	t.Helper()
	sp := s.h.NewSpec(t, o)
	sp.Init = driver.Process{Args: init, Env: []string{"HOME=/root"}}
	return sp
}

// start starts sp and registers its Delete.
func (s *suite) start(t *testing.T, sp driver.Spec) {
	t.Helper()
	if err := s.h.Driver.Start(ctxT(t), sp); err != nil {
		t.Fatalf("Start(%s): %v", sp.ID, err)
	}
	s.cleanup(t, sp.ID)
}

func (s *suite) cleanup(t *testing.T, id string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		if err := s.h.Driver.Delete(ctx, id); err != nil {
			t.Errorf("Delete(%s) in clean-up: %v", id, err)
		}
	})
}

func (s *suite) wantState(t *testing.T, id string, want driver.State) driver.Status {
	t.Helper()
	st, err := s.h.Driver.Status(ctxT(t), id)
	if err != nil {
		t.Fatalf("Status(%s): %v", id, err)
	}
	if st.State != want {
		t.Fatalf("Status(%s) = %s, want %s", id, st.State, want)
	}
	return st
}

// waitExit waits for id's init with the suite's timeout.
func (s *suite) waitExit(t *testing.T, id string) driver.Exit {
	t.Helper()
	e, err := s.h.Driver.Wait(ctxT(t), id)
	if err != nil {
		t.Fatalf("Wait(%s): %v", id, err)
	}
	return e
}

func (s *suite) testStartStatusList(t *testing.T) {
	sp := s.spec(t, SpecOptions{}, loopInit...)
	s.start(t, sp)
	st := s.wantState(t, sp.ID, driver.StateRunning)
	if !s.h.Simulated && st.InitPID <= 0 {
		t.Errorf("InitPID = %d, want a host PID", st.InitPID)
	}
	ids, err := s.h.Driver.List(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if !contains(ids, sp.ID) {
		t.Errorf("List = %v, missing %s", ids, sp.ID)
	}
	if _, err := s.h.Driver.Status(ctxT(t), NewID()); !errdefs.IsNotFound(err) {
		t.Errorf("Status of an unknown sandbox = %v, want not found", err)
	}
}

func (s *suite) testStartTwice(t *testing.T) {
	sp := s.spec(t, SpecOptions{}, loopInit...)
	s.start(t, sp)
	if err := s.h.Driver.Start(ctxT(t), sp); !errdefs.IsAlreadyExists(err) {
		t.Errorf("second Start = %v, want already exists", err)
	}
	s.wantState(t, sp.ID, driver.StateRunning)
}

// testBadInit starts a sandbox whose init does not exist: Start fails, or
// init ends at once with a non-zero code; after Delete nothing is left.
func (s *suite) testBadInit(t *testing.T) {
	sp := s.spec(t, SpecOptions{}, "/no/such/init")
	ctx := ctxT(t)
	if err := s.h.Driver.Start(ctx, sp); err != nil {
		t.Logf("Start: %v", err)
		if ids, _ := s.h.Driver.List(ctx); contains(ids, sp.ID) {
			t.Errorf("List after a failed Start has %s", sp.ID)
		}
	} else {
		s.cleanup(t, sp.ID)
		if e := s.waitExit(t, sp.ID); e.Code == 0 {
			t.Errorf("exit of a missing init = %+v, want non-zero", e)
		}
	}
	if err := s.h.Driver.Delete(ctx, sp.ID); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if s.h.Leftovers != nil {
		if left := s.h.Leftovers(t, []string{sp.ID}); len(left) > 0 {
			t.Errorf("left behind: %v", left)
		}
	}
}

func (s *suite) testExecUnknown(t *testing.T) {
	_, err := s.h.Driver.Exec(ctxT(t), NewID(), driver.Process{Args: []string{"true"}})
	if !errdefs.IsNotFound(err) {
		t.Errorf("Exec on an unknown sandbox = %v, want not found", err)
	}
}

func (s *suite) testWaitContext(t *testing.T) {
	sp := s.spec(t, SpecOptions{}, loopInit...)
	s.start(t, sp)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := s.h.Driver.Wait(ctx, sp.ID); !errors.Is(err, context.Canceled) {
		t.Errorf("Wait with a cancelled context = %v, want context.Canceled", err)
	}
	if _, err := s.h.Driver.Wait(ctxT(t), NewID()); !errdefs.IsNotFound(err) {
		t.Errorf("Wait on an unknown sandbox = %v, want not found", err)
	}
}

func (s *suite) testKill(t *testing.T) {
	sp := s.spec(t, SpecOptions{}, loopInit...)
	s.start(t, sp)
	if err := s.h.Driver.Kill(ctxT(t), sp.ID); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	e := s.waitExit(t, sp.ID)
	if !e.Signaled || e.Code != 137 || e.OOM {
		t.Errorf("exit after Kill = %+v, want code 137, signalled, not OOM", e)
	}
	s.wantState(t, sp.ID, driver.StateStopped)
	if _, err := s.h.Driver.Exec(ctxT(t), sp.ID, driver.Process{Args: []string{"true"}}); err == nil {
		t.Error("Exec after Kill succeeded")
	}
	if err := s.h.Driver.Kill(ctxT(t), sp.ID); err != nil {
		t.Errorf("second Kill = %v, want nil", err)
	}
}

func (s *suite) testKillFrozen(t *testing.T) {
	f := s.freezer(t)
	sp := s.spec(t, SpecOptions{}, loopInit...)
	s.start(t, sp)
	if err := f.Freeze(ctxT(t), sp.ID); err != nil {
		t.Fatalf("Freeze: %v", err)
	}
	if err := s.h.Driver.Kill(ctxT(t), sp.ID); err != nil {
		t.Fatalf("Kill of a frozen sandbox: %v", err)
	}
	if e := s.waitExit(t, sp.ID); e.Code != 137 || !e.Signaled {
		t.Errorf("exit after Kill while frozen = %+v, want 137", e)
	}
	s.wantState(t, sp.ID, driver.StateStopped)
}

func (s *suite) testDelete(t *testing.T) {
	ctx := ctxT(t)
	var ids []string
	for i := range 2 {
		sp := s.spec(t, SpecOptions{Network: i == 1}, loopInit...)
		s.start(t, sp)
		ids = append(ids, sp.ID)
	}
	// One stopped, one running (frozen where the driver can): Delete
	// handles both.
	if err := s.h.Driver.Kill(ctx, ids[0]); err != nil {
		t.Fatal(err)
	}
	s.waitExit(t, ids[0])
	if f, ok := s.h.Driver.(driver.Freezer); ok && s.h.Driver.Capabilities().Freeze {
		if err := f.Freeze(ctx, ids[1]); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range append(ids, ids...) {
		if err := s.h.Driver.Delete(ctx, id); err != nil {
			t.Errorf("Delete(%s): %v", id, err)
		}
	}
	if err := s.h.Driver.Delete(ctx, NewID()); err != nil {
		t.Errorf("Delete of an unknown sandbox = %v, want nil", err)
	}
	listed, err := s.h.Driver.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if contains(listed, id) {
			t.Errorf("List after Delete still has %s", id)
		}
		if _, err := s.h.Driver.Status(ctx, id); !errdefs.IsNotFound(err) {
			t.Errorf("Status(%s) after Delete = %v, want not found", id, err)
		}
	}
	if s.h.Leftovers != nil {
		if left := s.h.Leftovers(t, ids); len(left) > 0 {
			t.Errorf("left behind after Delete: %v", left)
		}
	}
}

func (s *suite) testRecover(t *testing.T) {
	if s.h.Reopen == nil {
		t.Skip("the harness cannot reopen the driver")
	}
	ctx := ctxT(t)
	running := s.spec(t, SpecOptions{}, loopInit...)
	s.start(t, running)
	stopped := s.spec(t, SpecOptions{}, loopInit...)
	s.start(t, stopped)
	if err := s.h.Driver.Kill(ctx, stopped.ID); err != nil {
		t.Fatal(err)
	}
	s.waitExit(t, stopped.ID)

	d2 := s.h.Reopen(t)
	ids, err := d2.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{running.ID, stopped.ID} {
		if !contains(ids, id) {
			t.Errorf("reopened driver's List = %v, missing %s", ids, id)
		}
	}
	if st, err := d2.Status(ctx, running.ID); err != nil || st.State != driver.StateRunning {
		t.Errorf("reopened Status(running) = %+v, %v", st, err)
	}
	if st, err := d2.Status(ctx, stopped.ID); err != nil || st.State != driver.StateStopped {
		t.Errorf("reopened Status(stopped) = %+v, %v", st, err)
	}
	if !s.h.Simulated {
		var out strings.Builder
		code, err := d2.Exec(ctx, running.ID, driver.Process{Args: []string{"echo", "hi"}, Stdout: &out})
		if err != nil || code != 0 || out.String() != "hi\n" {
			t.Errorf("reopened Exec = %d, %v, %q", code, err, out.String())
		}
	}
	if err := d2.Kill(ctx, running.ID); err != nil {
		t.Fatalf("reopened Kill: %v", err)
	}
	if _, err := d2.Wait(ctx, running.ID); err != nil {
		t.Errorf("reopened Wait: %v", err)
	}
	for _, id := range []string{running.ID, stopped.ID} {
		if err := d2.Delete(ctx, id); err != nil {
			t.Errorf("reopened Delete(%s): %v", id, err)
		}
	}
	// The first driver's view: gone too.
	for _, id := range []string{running.ID, stopped.ID} {
		if err := s.h.Driver.Delete(ctx, id); err != nil {
			t.Errorf("Delete(%s) after the reopened driver deleted it: %v", id, err)
		}
	}
	if s.h.Leftovers != nil {
		if left := s.h.Leftovers(t, []string{running.ID, stopped.ID}); len(left) > 0 {
			t.Errorf("left behind: %v", left)
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
