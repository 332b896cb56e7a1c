package app

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/warren-sandbox/warren/internal/node"
	"github.com/warren-sandbox/warren/internal/templates"
)

// CodeInterpreterID is the system template @e2b/code-interpreter starts
// by default.
const CodeInterpreterID = "code-interpreter-v1"

// codeInterpreterTemplate is the code interpreter's system template over
// the tar from scripts/build-code-interpreter-rootfs.sh: its server
// (images/code-interpreter) is the start command and its health the ready
// command, so sandboxes restore a snapshot with a warm Python kernel.
func codeInterpreterTemplate(tar string) templates.SystemTemplate {
	return templates.SystemTemplate{
		ID: CodeInterpreterID, RootFSTar: tar,
		StartCmd: "python3 /opt/warren/code-interpreter/server.py",
		ReadyCmd: "curl -sf http://127.0.0.1:49999/health",
		Env:      map[string]string{"MPLBACKEND": "module://matplotlib_inline.backend_inline", "PYTHONUNBUFFERED": "1", "PYDEVD_DISABLE_FILE_VALIDATION": "1"},
		CPUCount: templates.DefaultCPU, MemoryMB: 1024,
	}
}

// ensureCodeInterpreter makes the code-interpreter-v1 template from
// cfg.CodeInterpreterRootFSTar when that tar exists, and its snapshot on
// ready when the build has none. Failures are logged: the installation
// runs without the template (or with cold starts) rather than not at all.
func ensureCodeInterpreter(ctx context.Context, cfg Config, cat *templates.Catalog, a *node.Agent, log *slog.Logger) {
	tar := cfg.CodeInterpreterRootFSTar
	if tar == "" {
		return
	}
	if _, err := os.Stat(tar); err != nil {
		log.Info("code interpreter template not offered: no root filesystem tar (make code-interpreter-rootfs)", "tar", tar)
		return
	}
	b, err := cat.EnsureSystemTemplate(ctx, codeInterpreterTemplate(tar), templates.PrintProgress(cfg.Out, "# "+CodeInterpreterID+" template: "))
	if err != nil {
		log.Warn("code interpreter template not offered", "error", err)
		return
	}
	if b.SnapshotDir != "" {
		if _, err := os.Stat(b.SnapshotDir); err == nil {
			return
		}
	}
	dir := filepath.Join(cat.BuildDir(b.ID), "snapshot")
	os.RemoveAll(dir)
	log.Info("taking the code interpreter template's snapshot on ready", "build_id", b.ID)
	if err := a.Snapshot(ctx, b.NodeTemplate(), b.ReadyCmd, dir); err != nil {
		os.RemoveAll(dir)
		log.Warn("code interpreter template without snapshot: its sandboxes cold-start", "build_id", b.ID, "error", err)
		return
	}
	if _, err := cat.UpdateBuild(ctx, b.ID, func(x *templates.Build) error { x.SnapshotDir = dir; return nil }); err != nil {
		log.Warn("code interpreter snapshot not recorded", "build_id", b.ID, "error", err)
		return
	}
	log.Info("code interpreter template ready with its snapshot", "build_id", b.ID, "snapshot", dir)
}
