package mcpgateway

import (
	"os"
	"path/filepath"
	"time"
)

// Port is the gateway's port in the sandbox: the SDK's getMcpUrl() is
// https://<getHost(Port)>/mcp.
const Port = 50005

// TokenEnv is the variable the SDK passes the token in
// (GATEWAY_ACCESS_TOKEN: a random UUID of its own).
const TokenEnv = "GATEWAY_ACCESS_TOKEN"

// GitHubURLEnv, when set in the template's environment, replaces
// https://github.com as the base of github/<owner>/<repo> clones (a
// mirror, GitHub Enterprise, or file:// in tests).
const GitHubURLEnv = "MCP_GATEWAY_GITHUB_URL"

// Layout is where the gateway keeps what it installs and writes. The
// defaults are the template's (DefaultLayout); tests use a scratch tree.
type Layout struct {
	// Root holds servers/<name> (installed catalog servers), npm-cache/
	// (npm's cache of every catalog server, filled when the template's
	// root filesystem is made) and github/<owner>/<repo> (clones).
	Root string
	// StateDir holds servers' data (the memory server's file).
	StateDir string
	// TokenFile is where the token is written, readable by root only: the
	// SDK's getMcpToken() reads /etc/mcp-gateway/.token.
	TokenFile string
	// LogFile receives the serving process's log, readable by root only.
	LogFile string
	// Addr is the address the gateway listens on.
	Addr string
	// GitHubURL is the base of repository servers' clone URLs.
	GitHubURL string
	// NPM, Git and Shell are the programs installs and repository
	// servers run.
	NPM, Git, Shell string
	// StartTimeout bounds a start: every server installed, started and
	// listed. The SDK's command times out after 60 s.
	StartTimeout time.Duration
}

// DefaultLayout is the template's layout, with $MCP_GATEWAY_GITHUB_URL
// applied.
func DefaultLayout() Layout {
	l := Layout{
		Root:         "/opt/warren/mcp-gateway",
		StateDir:     "/var/lib/mcp-gateway",
		TokenFile:    "/etc/mcp-gateway/.token",
		LogFile:      "/var/log/mcp-gateway.log",
		Addr:         ":50005",
		GitHubURL:    "https://github.com",
		NPM:          "npm",
		Git:          "git",
		Shell:        "/bin/bash",
		StartTimeout: 50 * time.Second,
	}
	if u := os.Getenv(GitHubURLEnv); u != "" {
		l.GitHubURL = u
	}
	return l
}

func (l Layout) serverDir(name string) string { return filepath.Join(l.Root, "servers", name) }
func (l Layout) npmCache() string             { return filepath.Join(l.Root, "npm-cache") }
func (l Layout) repoDir(g *GitHub) string     { return filepath.Join(l.Root, "github", g.Owner, g.Repo) }
