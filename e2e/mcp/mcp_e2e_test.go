//go:build e2e

package mcpe2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/e2e/e2eserve"
)

// iso names the host objects of this test process's servers.
var iso = e2eserve.NewIsolation("mcp", "100.73.0.0/16", "wy")

// TestMain removes the isolated cgroup root and nftables table at the end.
func TestMain(m *testing.M) { e2eserve.Main(m, iso) }

const (
	apiKey     = "e2b_6d63702d6532652d6b6579000000000000aa0001"
	adminToken = "mcp-e2e-admin-token-0123456789abcdef"
)

// TestMCPGateway runs each case of mcp.mjs against one server in domain
// mode with the mcp-gateway template and a warm pool of it: a create with
// default resources claims a member. The secret the cases put in servers'
// configs must appear in no log of the server.
func TestMCPGateway(t *testing.T) {
	e2eserve.DomainPrerequisites(t)
	tar := os.Getenv("WARREN_TEST_MCP_GATEWAY_TAR")
	e2eserve.Require(t, e2eserve.Exists(tar), fmt.Sprintf("$WARREN_TEST_MCP_GATEWAY_TAR (%q) does not exist; run make mcp-gateway-rootfs", tar))
	e2eserve.Require(t, e2eserve.Exists("../node_modules/@modelcontextprotocol/sdk/package.json"), "e2e/node_modules/@modelcontextprotocol/sdk missing; run npm ci in e2e/")
	s := e2eserve.Start(t, e2eserve.Options{DataDir: t.TempDir(), APIKey: apiKey, AdminToken: adminToken, Isolation: iso, Domain: true,
		ExtraArgs: []string{"--mcp-gateway-rootfs", tar, "--pool-size", "1"}})
	keyB := newTeam(t, s, "mcp-e2e-b")
	waitPool(t, s, 1, 5*time.Minute)

	b := make([]byte, 12)
	_, _ = rand.Read(b)
	secret := "sk-mcp-e2e-" + hex.EncodeToString(b)
	env := []string{"MCP_E2E_SECRET=" + secret, "MCP_E2E_RUN=" + hex.EncodeToString(b[:4]), "MCP_E2E_KEY_B=" + keyB}
	for _, c := range []string{"gateway", "badconfig", "template", "tokens"} {
		t.Run(c, func(t *testing.T) {
			out, code := s.Run(t, env, "node", "mcp.mjs", c)
			if code != 0 || !strings.Contains(out, "OK "+c) {
				t.Fatalf("case %s (exit %d):\n%s", c, code, out)
			}
			t.Log(strings.TrimSpace(out))
		})
	}
	if hits := pool(t, s).Hits; hits < 1 {
		t.Error("no create claimed a member of the mcp-gateway pool")
	}
	if strings.Contains(s.Logs(), secret) {
		t.Error("the server's log holds a secret of an mcp config")
	}
}

// newTeam makes a team through the admin API and returns its API key.
func newTeam(t *testing.T, s *e2eserve.Server, id string) string {
	t.Helper()
	c := s.Client()
	c.Header.Set("X-Admin-Token", adminToken)
	var team struct {
		APIKey string `json:"apiKey"`
	}
	if _, _, err := c.Do(context.Background(), http.MethodPost, "/admin/teams", map[string]string{"id": id}, &team); err != nil || team.APIKey == "" {
		t.Fatalf("POST /admin/teams: %v %+v", err, team)
	}
	return team.APIKey
}

// pool is the mcp-gateway template's warm pool.
func pool(t *testing.T, s *e2eserve.Server) e2eserve.PoolStatus {
	t.Helper()
	c := s.Client()
	c.Header.Set("X-Admin-Token", adminToken)
	var pools []e2eserve.PoolStatus
	if _, _, err := c.Do(context.Background(), http.MethodGet, "/admin/pools", nil, &pools); err != nil {
		t.Fatal(err)
	}
	for _, p := range pools {
		if p.TemplateID == "mcp-gateway" {
			return p
		}
	}
	t.Fatalf("no warm pool of mcp-gateway: %+v", pools)
	return e2eserve.PoolStatus{}
}

// waitPool waits (within limit) until the pool has ready members.
func waitPool(t *testing.T, s *e2eserve.Server, ready int64, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for p := pool(t, s); p.Ready < ready; p = pool(t, s) {
		if time.Now().After(deadline) {
			t.Fatalf("mcp-gateway pool: %d ready after %s, want %d", p.Ready, limit, ready)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
