package noderole

import (
	"context"
	"log/slog"
	"os"

	"github.com/warren-sandbox/warren/internal/app"
	"github.com/warren-sandbox/warren/internal/node"
	"github.com/warren-sandbox/warren/internal/templates"
)

// CodeInterpreterID is the system template @e2b/code-interpreter starts
// by default.
const CodeInterpreterID = "code-interpreter-v1"

// CodeInterpreterMemoryMB is the memory of a code-interpreter-v1 sandbox
// created with default resources, and of its warm pool's members.
const CodeInterpreterMemoryMB = 1024

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
		CPUCount: templates.DefaultCPU, MemoryMB: CodeInterpreterMemoryMB,
	}
}

// ensureCodeInterpreter makes the code-interpreter-v1 template from
// cfg.CodeInterpreterRootFSTar when that tar exists, and its snapshot on
// ready (runsc) for a new build. Failures are logged: the installation
// runs without the template (or with cold starts) rather than not at all.
func ensureCodeInterpreter(ctx context.Context, sys *app.System, cfg Host, cat *templates.Catalog, a *node.Agent, log *slog.Logger) {
	tar := cfg.CodeInterpreterRootFSTar
	if tar == "" {
		return
	}
	if _, err := os.Stat(tar); err != nil {
		log.Info("code interpreter template not offered: no root filesystem tar (make code-interpreter-rootfs)", "tar", tar)
		return
	}
	st := codeInterpreterTemplate(tar)
	if cfg.Driver == "runsc" {
		st.Snapshot = a.Snapshot
	}
	b, err := cat.EnsureSystemTemplate(ctx, st, templates.PrintProgress(sys.Out, "# "+CodeInterpreterID+" template: "))
	if err != nil {
		log.Warn("code interpreter template not offered", "error", err)
		return
	}
	if b.SnapshotDir == "" {
		log.Warn("code interpreter template without snapshot: its sandboxes cold-start", "build_id", b.ID)
		return
	}
	log.Info("code interpreter template ready with its snapshot", "build_id", b.ID, "snapshot", b.SnapshotDir)
}
