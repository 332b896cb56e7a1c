package nodereg_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/nodeauth"
	"github.com/warren-sandbox/warren/internal/nodereg"
	"github.com/warren-sandbox/warren/internal/sandbox"
	"github.com/warren-sandbox/warren/internal/store"
	"github.com/warren-sandbox/warren/internal/store/storetest"
)

const credentialKey = "test-node-credential-key-0123456789abcdef"

func newCredentials(t *testing.T, st store.NodeTokens, key string) *nodereg.Credentials {
	t.Helper()
	c, err := nodereg.NewCredentials(st, key, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func issue(t *testing.T, c *nodereg.Credentials, nodeID string) (string, *store.NodeToken) {
	t.Helper()
	tok, rec, err := c.Issue(context.Background(), nodeID, "")
	if err != nil {
		t.Fatal(err)
	}
	return tok, rec
}

// TestHeartbeatAsAnotherNode is a compromised node's first attack: a node
// that holds its own token heartbeats as another node, rewriting its
// addresses or killing its sandboxes with a new boot ID. It is refused
// (403) and changes nothing of the other node.
func TestHeartbeatAsAnotherNode(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newCluster(t, storetest.SQLite(t), "node-b")
	creds := newCredentials(t, c.st, credentialKey)
	srv := httptest.NewServer(c.reg.Handler(creds))
	defer srv.Close()
	tokA, _ := issue(t, creds, "node-a")
	tokB, _ := issue(t, creds, "node-b")
	victim := c.create(t)

	b := status("node-b", "boot-1")
	if _, err := (&nodereg.Client{APIURL: srv.URL, Token: tokB}).Heartbeat(ctx, b); err != nil {
		t.Fatalf("node-b with its own token: %v", err)
	}
	forged := status("node-b", "boot-forged")
	forged.RPCAddress, forged.ProxyAddress = "https://attacker.example:443", "attacker.example:3101"
	_, err := (&nodereg.Client{APIURL: srv.URL, Token: tokA}).Heartbeat(ctx, forged)
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "403") {
		t.Fatalf("node-a heartbeating as node-b: %v, want 403", err)
	}
	n, err := c.st.GetNode(ctx, "node-b")
	if err != nil || n.BootID != "boot-1" || n.RPCAddress != b.RPCAddress || n.ProxyAddress != b.ProxyAddress {
		t.Fatalf("node-b after node-a's forged heartbeat: %+v, %v", n, err)
	}
	c.wantState(t, victim.ID, sandbox.StateRunning, "")
	if _, err := (&nodereg.Client{APIURL: srv.URL, Token: tokA}).Heartbeat(ctx, status("node-a", "boot-1")); err != nil {
		t.Fatalf("node-a as itself: %v", err)
	}
}

// TestHeartbeatTokens: only a good token issued for the node registers
// it; a revoked one, one from another control plane's key, a tampered
// one, the old shared kind or none is 401 and writes nothing.
func TestHeartbeatTokens(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.SQLite(t)
	creds := newCredentials(t, st, credentialKey)
	reg := nodereg.NewRegistry(st, nil, nil)
	srv := httptest.NewServer(reg.Handler(creds))
	defer srv.Close()
	good, rec := issue(t, creds, "n1")
	revoked, revRec := issue(t, creds, "n1")
	if _, err := creds.Revoke(ctx, "n1", revRec.ID); err != nil {
		t.Fatal(err)
	}
	other := newCredentials(t, st, "another-control-planes-key-0123456789abcdef")
	foreign, foreignRec := issue(t, other, "n1") // its record in this store: only the key differs
	tampered := good[:len(good)-1] + map[bool]string{true: "0", false: "1"}[good[len(good)-1] != '0']
	for name, tok := range map[string]string{
		"revoked": revoked, "another key": foreign, "tampered": tampered, "shared kind": "node-secret-0123456789",
		"none": "", "unknown id": "wnt_0123456789abcdef_" + strings.Repeat("0", 64),
	} {
		_, err := (&nodereg.Client{APIURL: srv.URL, Token: tok}).Heartbeat(ctx, status("n1", "b1"))
		if !errors.Is(err, errdefs.ErrUnauthorized) {
			t.Errorf("%s token: %v, want unauthorized", name, err)
		}
	}
	if nodes, _ := st.ListNodes(ctx); len(nodes) != 0 {
		t.Fatalf("a refused heartbeat registered %d nodes", len(nodes))
	}
	if _, err := (&nodereg.Client{APIURL: srv.URL, Token: good}).Heartbeat(ctx, status("n1", "b1")); err != nil {
		t.Fatalf("the good token: %v", err)
	}
	// Revoked once in use: refused from the next heartbeat on.
	if _, err := creds.Revoke(ctx, "n1", rec.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := (&nodereg.Client{APIURL: srv.URL, Token: good}).Heartbeat(ctx, status("n1", "b1")); !errors.Is(err, errdefs.ErrUnauthorized) {
		t.Fatalf("a token revoked in use: %v, want unauthorized", err)
	}
	if _, err := creds.Revoke(ctx, "n1", foreignRec.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := creds.Token(ctx, "n1"); !errdefs.IsUnavailable(err) {
		t.Fatalf("the control plane's credential for a node without a good token: %v, want unavailable", err)
	}
}

// TestInsecureLoopback: without a credential key nodes register without
// a token, from loopback only.
func TestInsecureLoopback(t *testing.T) {
	t.Parallel()
	st := storetest.SQLite(t)
	creds := newCredentials(t, st, "")
	if _, _, err := creds.Issue(context.Background(), "n1", ""); !errdefs.IsUnsupported(err) {
		t.Errorf("Issue without a key: %v, want unsupported", err)
	}
	for addr, ok := range map[string]bool{"127.0.0.1:4000": true, "[::1]:4000": true, "10.0.0.5:4000": false} {
		r := httptest.NewRequest(http.MethodPost, nodereg.HeartbeatPath, nil)
		r.RemoteAddr = addr
		if id, err := creds.Authenticate(r); (err == nil) != ok || id != "" {
			t.Errorf("from %s: %q %v, want ok %v", addr, id, err, ok)
		}
	}
}

// TestCredentialRotation: the control plane's calls to a node use the
// token the node authenticates with: a new one once the node uses it.
func TestCredentialRotation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.SQLite(t)
	creds := newCredentials(t, st, credentialKey)
	creds.CacheTTL = 0
	first, _ := issue(t, creds, "n1")
	if tok, err := creds.Token(ctx, "n1"); err != nil || tok != first {
		t.Fatalf("before any use: %q %v, want the only token", tok, err)
	}
	second, _ := issue(t, creds, "n1")
	use := func(tok string) {
		r := httptest.NewRequest(http.MethodPost, nodereg.HeartbeatPath, nil)
		r.Header.Set("Authorization", "Bearer "+tok)
		if id, err := creds.Authenticate(r); err != nil || id != "n1" {
			t.Fatalf("authenticate: %q %v", id, err)
		}
	}
	use(first)
	if tok, _ := creds.Token(ctx, "n1"); tok != first {
		t.Fatal("the control plane left the token in use before the node did")
	}
	time.Sleep(2 * time.Millisecond)
	use(second)
	if tok, _ := creds.Token(ctx, "n1"); tok != second {
		t.Fatal("the control plane kept the old token after the node rotated")
	}
	rpc, _ := creds.Credential(ctx, "n1", nodeauth.PurposeRPC)
	proxy, _ := creds.Credential(ctx, "n1", nodeauth.PurposeProxy)
	if rpc != nodeauth.Credential(second, nodeauth.PurposeRPC) || rpc == proxy || rpc == second {
		t.Fatal("the derived credentials are not the node's own, one per purpose")
	}
}

// TestTokenAdminRoutes: tokens are issued, listed (never shown again)
// and revoked through the admin routes, per node.
func TestTokenAdminRoutes(t *testing.T) {
	t.Parallel()
	st := storetest.SQLite(t)
	creds := newCredentials(t, st, credentialKey)
	mux := http.NewServeMux()
	creds.AdminRoutes(func(p string, h http.Handler) { mux.Handle(p, h) })
	srv := httptest.NewServer(mux)
	defer srv.Close()
	do := func(method, path, body string) (int, []byte) {
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		b.ReadFrom(resp.Body)
		return resp.StatusCode, b.Bytes()
	}
	code, body := do("POST", "/admin/nodes/node-1/tokens", `{"name":"first"}`)
	var issued nodereg.IssuedToken
	if code != http.StatusCreated || json.Unmarshal(body, &issued) != nil || !nodeauth.ValidToken(issued.Token) || issued.NodeID != "node-1" || issued.Name != "first" {
		t.Fatalf("issue: %d %s", code, body)
	}
	if code, body := do("POST", "/admin/nodes/Bad ID!/tokens", ``); code != http.StatusBadRequest && code != http.StatusNotFound {
		t.Errorf("issue for a bad node ID: %d %s", code, body)
	}
	code, body = do("GET", "/admin/nodes/node-1/tokens", "")
	if code != http.StatusOK || bytes.Contains(body, []byte(issued.Token)) || !bytes.Contains(body, []byte(issued.ID)) {
		t.Fatalf("list: %d %s", code, body)
	}
	if code, _ := do("DELETE", "/admin/nodes/node-2/tokens/"+issued.ID, ""); code != http.StatusNotFound {
		t.Errorf("revoke through another node: %d, want 404", code)
	}
	code, body = do("DELETE", "/admin/nodes/node-1/tokens/"+issued.ID, "")
	var info nodereg.TokenInfo
	if code != http.StatusOK || json.Unmarshal(body, &info) != nil || info.RevokedAt == nil {
		t.Fatalf("revoke: %d %s", code, body)
	}
}
