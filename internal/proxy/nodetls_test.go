package proxy_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/warren-sandbox/warren/e2e/e2eserve"
	"github.com/warren-sandbox/warren/internal/lifecycle/fakenode"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/nodeauth"
	"github.com/warren-sandbox/warren/internal/proxy"
	"github.com/warren-sandbox/warren/internal/sandbox"
)

// TestNodeHopTLS: the edge proxy reaches a node proxy that serves TLS
// over TLS, its certificate checked against the node CA, with the
// credential of that node (the route's NodeID); a node proxy whose
// certificate the CA did not sign gets nothing, nor does one the hop
// reaches without the node's own credential.
func TestNodeHopTLS(t *testing.T) {
	t.Parallel()
	be, _ := backendAt(t, "127.0.0.2:0")
	fn := fakenode.New()
	fn.Put(&nodeapi.Sandbox{ID: "sbx1", State: sandbox.StateRunning, Host: "127.0.0.2", Address: be.Listener.Addr().String()})
	tokA := "wnt_00000000000000aa_" + "a"
	credA := nodeauth.Credential(tokA, nodeauth.PurposeProxy)
	np, err := proxy.NewNode(proxy.NodeConfig{Node: fn, Token: credA})
	if err != nil {
		t.Fatal(err)
	}
	cert, key := e2eserve.IssueCert(t, t.TempDir(), "127.0.0.1")
	srvTLS, err := nodeauth.ServerTLS(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: np, TLSConfig: srvTLS, ErrorLog: log.New(io.Discard, "", 0)}
	go srv.ServeTLS(ln, "", "")
	t.Cleanup(func() { srv.Close() })
	via := ln.Addr().String()

	edgeWith := func(nodeTLS *tls.Config, creds map[string]string) *httptest.Server {
		edge, err := proxy.New(proxy.Config{Router: fakeRouter{
			"sbx1": {SandboxID: "sbx1", Host: "127.0.0.1", NodeProxy: via, NodeID: "node-a"},
			"sbxb": {SandboxID: "sbx1", Host: "127.0.0.1", NodeProxy: via, NodeID: "node-b"},
		}, Domain: "e2b.test", NodeTLS: nodeTLS, NodeHop: func(_ context.Context, id string) (proxy.NodeHop, error) {
			return proxy.NodeHop{Credential: creds[id], TLS: true}, nil
		}})
		if err != nil {
			t.Fatal(err)
		}
		s := httptest.NewServer(edge)
		t.Cleanup(s.Close)
		return s
	}
	creds := map[string]string{"node-a": credA, "node-b": nodeauth.Credential("wnt_00000000000000bb_"+"b", nodeauth.PurposeProxy)}
	envd := strconv.Itoa(proxy.EnvdPort)
	good := edgeWith(e2eserve.ClientTLS(t), creds)
	if code, body := get(t, good.URL+"/health", map[string]string{"Host": envd + "-sbx1.e2b.test"}); code != http.StatusNoContent {
		t.Errorf("over TLS to the node proxy: %d %s", code, body)
	}
	// The route says the sandbox is node-b's: node-b's credential, which
	// node-a's proxy does not take.
	if code, _ := get(t, good.URL+"/health", map[string]string{"Host": envd + "-sbxb.e2b.test"}); code == http.StatusNoContent {
		t.Error("another node's credential opened the node proxy")
	}
	untrusting := edgeWith(&tls.Config{RootCAs: x509.NewCertPool(), MinVersion: tls.VersionTLS12}, creds)
	if code, _ := get(t, untrusting.URL+"/health", map[string]string{"Host": envd + "-sbx1.e2b.test"}); code != http.StatusBadGateway {
		t.Errorf("a node proxy whose certificate is not trusted: %d, want 502", code)
	}
}
