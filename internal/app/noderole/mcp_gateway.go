package noderole

import (
	"context"
	"log/slog"
	"os"

	"github.com/warren-sandbox/warren/internal/app"
	"github.com/warren-sandbox/warren/internal/templates"
)

// MCPGatewayID is the system template the e2b SDK creates from when
// Sandbox.create is given `mcp` (Sandbox.defaultMcpTemplate), and the only
// one Template().addMcpServer builds on.
const MCPGatewayID = "mcp-gateway"

// MCPGatewayMemoryMB is the memory of an mcp-gateway sandbox created with
// default resources, and of its warm pool's members: the gateway and a
// few Node.js servers.
const MCPGatewayMemoryMB = 1024

// mcpGatewayTemplate is the MCP gateway's system template over the tar
// from scripts/build-mcp-gateway-rootfs.sh (the code interpreter's with
// cmd/mcp-gateway, npm and the catalog's servers added). It has no start
// command: the SDK starts the gateway with the create's config.
func mcpGatewayTemplate(tar string) templates.SystemTemplate {
	return templates.SystemTemplate{
		ID: MCPGatewayID, RootFSTar: tar,
		CPUCount: templates.DefaultCPU, MemoryMB: MCPGatewayMemoryMB,
	}
}

// ensureMCPGateway makes the mcp-gateway template from
// cfg.MCPGatewayRootFSTar when that tar exists. Failures are logged: the
// installation runs without the template rather than not at all.
func ensureMCPGateway(ctx context.Context, sys *app.System, cfg Host, cat *templates.Catalog, log *slog.Logger) {
	tar := cfg.MCPGatewayRootFSTar
	if tar == "" {
		return
	}
	if _, err := os.Stat(tar); err != nil {
		log.Info("mcp-gateway template not offered: no root filesystem tar (make mcp-gateway-rootfs)", "tar", tar)
		return
	}
	b, err := cat.EnsureSystemTemplate(ctx, mcpGatewayTemplate(tar), templates.PrintProgress(sys.Out, "# "+MCPGatewayID+" template: "))
	if err != nil {
		log.Warn("mcp-gateway template not offered", "error", err)
		return
	}
	log.Info("mcp-gateway template ready", "build_id", b.ID)
}
