package builder

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/nodeapi"
)

type fakeSnapshotter struct {
	err  error
	got  nodeapi.Template
	cmd  string
	dirs []string
}

func (s *fakeSnapshotter) Snapshot(_ context.Context, t nodeapi.Template, readyCmd, dir string) error {
	s.got, s.cmd = t, readyCmd
	if s.err != nil {
		os.MkdirAll(dir, 0o755) // a partial image the builder must remove
		return s.err
	}
	s.dirs = append(s.dirs, dir)
	return os.WriteFile(filepath.Join(mkdir(dir), "image"), []byte("mem"), 0o644)
}

func mkdir(d string) string { os.MkdirAll(d, 0o755); return d }

func TestSnapshotOnReady(t *testing.T) {
	needRoot(t)
	t.Parallel()
	tests := []struct {
		name     string
		err      error
		wantSnap bool
		wantLog  string
	}{
		{"taken", nil, true, "Snapshot taken"},
		{"driver cannot", errdefs.ErrUnsupported, false, "cold-start"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, tinyRootFS(t))
			snap := &fakeSnapshotter{err: tc.err}
			f.b.cfg.Snapshotter = snap
			bd, err := f.build(t, "team", "snap", Spec{FromTemplate: "base", StartCmd: "echo up > /tmp/up", ReadyCmd: "test -f /tmp/up"})
			if err != nil {
				t.Fatalf("%v\n%s", err, f.logs(t, bd.ID))
			}
			if snap.got.RootFS != bd.RootFSDir || snap.got.StartCmd != "echo up > /tmp/up" || snap.cmd != "test -f /tmp/up" || snap.got.User != "user" {
				t.Errorf("snapshotter got %+v, ready %q", snap.got, snap.cmd)
			}
			if (bd.SnapshotDir != "") != tc.wantSnap {
				t.Errorf("SnapshotDir %q", bd.SnapshotDir)
			}
			if !tc.wantSnap {
				if _, err := os.Stat(filepath.Join(f.cat.BuildDir(bd.ID), "snapshot")); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("partial snapshot left: %v", err)
				}
			}
			nt, err := f.cat.Resolve(context.Background(), "team", "snap")
			if err != nil || nt.SnapshotDir != bd.SnapshotDir {
				t.Errorf("Resolve = %+v, %v", nt, err)
			}
			if logs := f.logs(t, bd.ID); !strings.Contains(logs, tc.wantLog) {
				t.Errorf("logs lack %q:\n%s", tc.wantLog, logs)
			}
		})
	}
}
