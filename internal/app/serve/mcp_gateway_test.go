package serve

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/warren-sandbox/warren/internal/apiserver"
	"github.com/warren-sandbox/warren/internal/app/noderole"
	"github.com/warren-sandbox/warren/internal/lifecycle"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/sandbox"
	"github.com/warren-sandbox/warren/internal/store/storetest"
)

// TestMCPGatewayPool: the mcp-gateway template (noderole's
// TestMCPGatewayTemplate) has a warm pool by default when it is offered,
// sized for its own members; 0 turns it off.
func TestMCPGatewayPool(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	n, _, _, closeNode, err := fakeNode(ctx, t, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer closeNode()
	tmpls := noderole.StaticTemplates{
		"base": {ID: "base", BuildID: "base", RootFS: "/nonexistent/fake-rootfs"},
		noderole.MCPGatewayID: {ID: noderole.MCPGatewayID, BuildID: "gw1", RootFS: "/nonexistent/fake-rootfs",
			Resources: sandbox.Resources{MemoryMB: noderole.MCPGatewayMemoryMB}},
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
	if p, ok := pl.Pools()[noderole.MCPGatewayID]; !ok || p.Size != 2 || p.BuildID != "gw1" {
		t.Errorf("mcp-gateway pool %+v (there: %v), want size 2 of build gw1", p, ok)
	}
	if err := setDefaultPools(ctx, 0, pl, tmpls, api, log); err != nil {
		t.Fatal(err)
	}
	if p, ok := pl.Pools()[noderole.MCPGatewayID]; ok {
		t.Errorf("mcp-gateway pool after --pool-size 0: %+v", p)
	}
}
