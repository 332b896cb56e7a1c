// Package mcpgateway is Warren's MCP gateway: the program the e2b SDK
// starts inside a sandbox of the `mcp-gateway` template when
// Sandbox.create is given `mcp` (`mcp-gateway --config '<json>'`), and
// runs at template build time for Template().addMcpServer
// (`mcp-gateway pull NAME...`).
//
// The gateway reads the config (one key per server: a catalog name or
// `github/<owner>/<repo>`), starts each server (stdio servers as child
// processes, remote ones through their streamable HTTP endpoint) as an
// MCP client, and serves one MCP endpoint that aggregates their tools,
// prompts and resources: streamable HTTP on /mcp and the older HTTP+SSE
// transport on /sse, on port 50005, behind a bearer token it writes to
// /etc/mcp-gateway/.token (root only). A config it cannot satisfy fails
// the start with a message naming the server; values a server's config
// marks secret (a GitHub server's envs) and the token never reach a log.
//
// The start is two processes: the command the SDK runs checks the config,
// starts the serving process in a session of its own (so that it outlives
// the command and envd's signals to the command's group) and waits for it
// to report that every server is up, or why one is not; it then exits
// with that outcome, which the SDK turns into its "Failed to start MCP
// gateway" error.
//
// Catalog servers from npm are pinned, with their whole dependency tree,
// by the lockfiles under catalog/ (embedded in the binary); the template's
// root filesystem holds npm's cache of every one of them, so that a pull
// installs offline (docs/mcp.md).
package mcpgateway
