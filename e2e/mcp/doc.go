// Package mcpe2e runs `warren serve` with the mcp-gateway system template
// end to end with the real e2b SDK and the MCP TypeScript SDK
// (@modelcontextprotocol/sdk) from npm, in domain mode (getMcpUrl() is
// https://50005-<id>.<domain>/mcp): Sandbox.create({mcp}), a client
// listing and calling the reference servers' tools with getMcpToken(), a
// wrong token, a config the gateway cannot satisfy (the SDK's error, the
// sandbox killed), Template().addMcpServer with a github/<owner>/<repo>
// server, and tokens of other sandboxes and teams. The tests carry the
// build tag e2e; they need the template's tar
// ($WARREN_TEST_MCP_GATEWAY_TAR, from `make mcp-gateway-rootfs`) besides
// what e2e/sdk needs, and no internet.
package mcpe2e
