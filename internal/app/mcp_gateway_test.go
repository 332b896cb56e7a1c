package app

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warren-sandbox/warren/internal/apiserver"
	"github.com/warren-sandbox/warren/internal/lifecycle"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/sandbox"
	"github.com/warren-sandbox/warren/internal/store/storetest"
	"github.com/warren-sandbox/warren/internal/templates"
	"github.com/warren-sandbox/warren/internal/testenv"
)

// TestMCPGatewayTemplate: the mcp-gateway template is the name the SDK
// uses, reserved from tenants, with no start command (the SDK starts the
// gateway with the create's config), and a warm pool by default when it
// is offered, sized for its own members; 0 turns it off.
func TestMCPGatewayTemplate(t *testing.T) {
	t.Parallel()
	st := mcpGatewayTemplate("/x.tar")
	if st.ID != "mcp-gateway" || st.StartCmd != "" || st.ReadyCmd != "" || st.MemoryMB != MCPGatewayMemoryMB {
		t.Fatalf("%+v", st)
	}
	if !slices.Contains(templates.ReservedNames, MCPGatewayID) {
		t.Fatalf("%s is not reserved: %q", MCPGatewayID, templates.ReservedNames)
	}
	ctx := context.Background()
	n, _, closeNode, err := fakeNode(ctx, Config{DataDir: t.TempDir(), Logger: testenv.Logger(t)}, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	defer closeNode()
	tmpls := StaticTemplates{
		"base": {ID: "base", BuildID: "base", RootFS: "/nonexistent/fake-rootfs"},
		MCPGatewayID: {ID: MCPGatewayID, BuildID: "gw1", RootFS: "/nonexistent/fake-rootfs",
			Resources: sandbox.Resources{MemoryMB: MCPGatewayMemoryMB}},
	}
	pl := n.(nodeapi.Pooler)
	store := storetest.SQLite(t)
	lc, err := lifecycle.New(lifecycle.Config{Store: store, Node: n})
	if err != nil {
		t.Fatal(err)
	}
	api, err := apiserver.New(apiserver.Config{Store: store, Lifecycle: lc, Templates: tmpls, AdminToken: "adm", Pools: pl})
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if err := setDefaultPools(ctx, 2, pl, tmpls, api, log); err != nil {
		t.Fatal(err)
	}
	if p, ok := pl.Pools()[MCPGatewayID]; !ok || p.Size != 2 || p.BuildID != "gw1" {
		t.Errorf("mcp-gateway pool %+v (there: %v), want size 2 of build gw1", p, ok)
	}
	if err := setDefaultPools(ctx, 0, pl, tmpls, api, log); err != nil {
		t.Fatal(err)
	}
	if p, ok := pl.Pools()[MCPGatewayID]; ok {
		t.Errorf("mcp-gateway pool after --pool-size 0: %+v", p)
	}
}
