package noderole

import (
	"slices"
	"testing"

	"github.com/warren-sandbox/warren/internal/templates"
)

// TestMCPGatewayTemplate: the mcp-gateway template is the name the SDK
// uses, reserved from tenants, with no start command (the SDK starts the
// gateway with the create's config); serve's TestMCPGatewayPool checks
// its warm pool.
func TestMCPGatewayTemplate(t *testing.T) {
	t.Parallel()
	st := mcpGatewayTemplate("/x.tar")
	if st.ID != "mcp-gateway" || st.StartCmd != "" || st.ReadyCmd != "" || st.MemoryMB != MCPGatewayMemoryMB {
		t.Fatalf("%+v", st)
	}
	if !slices.Contains(templates.ReservedNames, MCPGatewayID) {
		t.Fatalf("%s is not reserved: %q", MCPGatewayID, templates.ReservedNames)
	}
}
