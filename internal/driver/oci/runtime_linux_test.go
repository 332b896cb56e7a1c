package oci

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/warren-sandbox/warren/internal/driver"
	"github.com/warren-sandbox/warren/internal/errdefs"
)

// fakeRuntime is an OCI runtime CLI in shell: `state ID` prints
// <root>/ID.state or fails as runc does for an unknown container (and fails
// alike, with the same words, for a container whose state is "broken"),
// `list` lists the state files, pause and resume fail with $FAKE_FAIL's
// code.
const fakeRuntime = `#!/bin/sh
root=$2
shift 2
case $1 in
state) [ -f "$root/$2.state" ] && [ "$(cat "$root/$2.state")" != broken ] || { echo "container \"$2\" does not exist" >&2; exit 1; }; cat "$root/$2.state" ;;
list) for f in "$root"/*.state; do [ -f "$f" ] && basename "$f" .state; done; exit 0 ;;
pause|resume) exit "$(cat "$root/fail" 2>/dev/null || echo 0)" ;;
*) echo "unknown command $1" >&2; exit 2 ;;
esac
`

// fakeRuntimeBin is fakeRuntime written once by TestMain: writing an
// executable while parallel tests fork and exec can fail the exec with
// ETXTBSY (a forked child holds the file open for writing).
var fakeRuntimeBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "oci-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fakeRuntimeBin = filepath.Join(dir, "fake-runtime")
	if err := os.WriteFile(fakeRuntimeBin, []byte(fakeRuntime), 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

type fakeEnv struct {
	rt      *Runtime
	adopted []string
	watched []string
}

func newFakeRuntime(t *testing.T, checkAlive bool) *fakeEnv {
	t.Helper()
	env := &fakeEnv{}
	rt, err := NewRuntime(RuntimeConfig{
		Name: "fake", Path: fakeRuntimeBin, StateDir: t.TempDir(),
		CgroupRoot: "/warren-test", DefaultPids: 7, CheckAlive: checkAlive,
		Adopt: func(ctx context.Context, id string, b *Box) { env.adopted = append(env.adopted, id) },
		Watch: func(id string, b *Box) { env.watched = append(env.watched, id) },
	})
	if err != nil {
		t.Fatal(err)
	}
	env.rt = rt
	return env
}

// setState makes the fake runtime report id with status and pid.
func (e *fakeEnv) setState(t *testing.T, id, status string, pid int) {
	t.Helper()
	js := fmt.Sprintf(`{"id":%q,"status":%q,"pid":%d,"bundle":"/b/%s"}`, id, status, pid, id)
	if err := os.WriteFile(filepath.Join(e.rt.Root(), id+".state"), []byte(js), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestRuntimeStatus(t *testing.T) {
	t.Parallel()
	const deadPID = 1 << 30
	tests := []struct {
		name       string
		checkAlive bool
		status     string // runtime's status; "" for an unknown container
		pid        int
		record     bool
		want       driver.Status
		wantErr    func(error) bool
	}{
		{name: "unknown", wantErr: errdefs.IsNotFound},
		{name: "record only", record: true, want: driver.Status{ID: "s", State: driver.StateStopped}},
		{name: "running", status: "running", pid: os.Getpid(), want: driver.Status{ID: "s", State: driver.StateRunning, InitPID: os.Getpid()}},
		{name: "paused", status: "paused", pid: os.Getpid(), want: driver.Status{ID: "s", State: driver.StateFrozen, InitPID: os.Getpid()}},
		{name: "stopped has no pid", status: "stopped", pid: 42, want: driver.Status{ID: "s", State: driver.StateStopped}},
		{name: "dead process trusted", status: "running", pid: deadPID, want: driver.Status{ID: "s", State: driver.StateRunning, InitPID: deadPID}},
		{name: "dead process checked", checkAlive: true, status: "running", pid: deadPID, want: driver.Status{ID: "s", State: driver.StateStopped}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			env := newFakeRuntime(t, tt.checkAlive)
			if tt.status != "" {
				env.setState(t, "s", tt.status, tt.pid)
			}
			if tt.record {
				if err := env.rt.Index().Put(Record{ID: "s", BundleDir: "/b/s"}); err != nil {
					t.Fatal(err)
				}
			}
			got, err := env.rt.Status(t.Context(), "s")
			if tt.wantErr != nil {
				if !tt.wantErr(err) {
					t.Fatalf("Status = %+v, %v; want an error of the right class", got, err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("Status = %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

func TestRuntimeList(t *testing.T) {
	t.Parallel()
	env := newFakeRuntime(t, false)
	env.setState(t, "a", "running", 1)
	env.setState(t, "b", "running", 1)
	for _, id := range []string{"b", "c"} {
		if err := env.rt.Index().Put(Record{ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := env.rt.List(t.Context())
	if err != nil || !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Errorf("List = %v, %v", got, err)
	}
}

func TestRuntimeFreeze(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		fail    bool   // the runtime's pause fails
		status  string // the runtime's status afterwards
		wantErr func(error) bool
	}{
		{name: "pause works", status: "paused"},
		{name: "already paused", fail: true, status: "paused"},
		{name: "pause refused", fail: true, status: "stopped", wantErr: errdefs.IsConflict},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			env := newFakeRuntime(t, false)
			if err := env.rt.Freeze(t.Context(), "s"); !errdefs.IsNotFound(err) {
				t.Fatalf("Freeze of an unknown sandbox = %v", err)
			}
			if err := env.rt.Index().Put(Record{ID: "s", BundleDir: "/b/s"}); err != nil {
				t.Fatal(err)
			}
			env.setState(t, "s", tt.status, os.Getpid())
			if tt.fail {
				if err := os.WriteFile(filepath.Join(env.rt.Root(), "fail"), []byte("1"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			err := env.rt.Freeze(t.Context(), "s")
			if tt.wantErr == nil && err != nil || tt.wantErr != nil && !tt.wantErr(err) {
				t.Errorf("Freeze = %v", err)
			}
		})
	}
}

func TestRuntimeFinishExit(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		killed, ckpt bool
		in, want     driver.Exit
	}{
		{name: "own code", in: driver.Exit{Code: 3}, want: driver.Exit{Code: 3}},
		{name: "unknown", in: driver.Exit{Code: -1}, want: driver.Exit{Code: -1}},
		{name: "killed, unknown", killed: true, in: driver.Exit{Code: -1}, want: driver.Exit{Code: 137, Signaled: true}},
		{name: "killed, known", killed: true, in: driver.Exit{Code: 0}, want: driver.Exit{Code: 0}},
		{name: "checkpointed", ckpt: true, killed: true, in: driver.Exit{Code: -1}, want: driver.Exit{Code: 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			env := newFakeRuntime(t, false)
			b := newBox("/warren-test/no-such-cgroup", t.TempDir())
			if tt.killed {
				b.MarkKilled()
			}
			b.SetCheckpointing(tt.ckpt)
			env.rt.FinishExit(b, tt.in)
			got, err := b.Watch.Wait(t.Context())
			got.At = tt.want.At
			if err != nil || got != tt.want {
				t.Errorf("exit = %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

func TestRuntimePrepare(t *testing.T) {
	t.Parallel()
	env := newFakeRuntime(t, false)
	s := baseSpec(t)
	b, err := env.rt.Prepare(s, Options{})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := env.rt.Index().Get(s.ID)
	if err != nil || rec.CgroupsPath != "/warren-test/sbx-abc" || rec.BundleDir != s.BundleDir {
		t.Errorf("record = %+v, %v", rec, err)
	}
	if cfg, err := ReadConfig(s.BundleDir); err != nil || *cfg.Linux.Resources.Pids.Limit != 7 {
		t.Errorf("bundle config = %v", err)
	}
	if _, err := env.rt.Prepare(s, Options{}); !errdefs.IsAlreadyExists(err) {
		t.Errorf("second Prepare = %v", err)
	}
	env.rt.Discard(s.ID, b)
	if _, err := os.Stat(s.BundleDir); !os.IsNotExist(err) || env.rt.Len() != 0 {
		t.Errorf("after Discard: bundle %v, %d boxes", err, env.rt.Len())
	}

	// A bundle that cannot be written leaves nothing behind.
	s.ID = "def"
	s.BundleDir = filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(s.BundleDir, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := env.rt.Prepare(s, Options{}); err == nil {
		t.Fatal("Prepare over a file succeeded")
	}
	if _, err := env.rt.Index().Get(s.ID); !errdefs.IsNotFound(err) || env.rt.Len() != 0 {
		t.Errorf("after a failed Prepare: record %v, %d boxes", err, env.rt.Len())
	}
	// An invalid spec reserves nothing.
	s.Init.Args = nil
	if _, err := env.rt.Prepare(s, Options{}); !errdefs.IsInvalid(err) || env.rt.Len() != 0 {
		t.Errorf("Prepare of an invalid spec = %v, %d boxes", err, env.rt.Len())
	}
}

func TestRuntimeLookupAdopts(t *testing.T) {
	t.Parallel()
	env := newFakeRuntime(t, false)
	ctx := t.Context()
	stopped := Record{ID: "gone", BundleDir: "/b/gone", Stopped: true, Exit: driver.Exit{Code: 5}}
	live := Record{ID: "live", BundleDir: "/b/live", CgroupsPath: "/c"}
	for _, r := range []Record{stopped, live} {
		if err := env.rt.Index().Put(r); err != nil {
			t.Fatal(err)
		}
	}
	b, err := env.rt.Lookup(ctx, "gone")
	if err != nil || !b.Watch.Finished() {
		t.Fatalf("Lookup of a checkpointed sandbox = %v, finished %v", err, b != nil && b.Watch.Finished())
	}
	if e, _ := b.Watch.Wait(ctx); e.Code != 5 {
		t.Errorf("exit of a checkpointed sandbox = %+v", e)
	}
	for range 2 {
		b, err = env.rt.Lookup(ctx, "live")
		if err != nil || b.BundleDir != "/b/live" || b.CgroupsPath != "/c" || b.Watch.Finished() {
			t.Fatalf("Lookup of a live sandbox = %+v, %v", b, err)
		}
	}
	if !slices.Equal(env.adopted, []string{"live"}) || !slices.Equal(env.watched, []string{"live"}) {
		t.Errorf("adopted %v, watched %v; want [live] once each", env.adopted, env.watched)
	}
	if _, err := env.rt.Lookup(ctx, "none"); !errdefs.IsNotFound(err) {
		t.Errorf("Lookup of an unknown sandbox = %v", err)
	}
}

// TestCLIStateAbsent: a container is not found when the runtime's list does
// not name it, whatever its failure says: a failing state of a listed
// container is no not-found.
func TestCLIStateAbsent(t *testing.T) {
	t.Parallel()
	env := newFakeRuntime(t, false)
	cli := CLI{Path: fakeRuntimeBin, Global: []string{"--root", env.rt.Root()}}
	if _, err := cli.State(t.Context(), "gone"); !errdefs.IsNotFound(err) {
		t.Fatalf("State of an unknown container = %v, want not found", err)
	}
	if err := os.WriteFile(filepath.Join(env.rt.Root(), "broken.state"), []byte("broken"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := cli.State(t.Context(), "broken")
	if err == nil || errdefs.IsNotFound(err) {
		t.Fatalf("State of a listed container that fails = %v, want a failure that is not not-found", err)
	}
	if cli.Absent(t.Context(), "gone", errors.New("not a runtime failure")) {
		t.Fatal("Absent of an error that is no RunError")
	}
}
