package apirole

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/app"
	"github.com/warren-sandbox/warren/internal/lifecycle/fakenode"
	"github.com/warren-sandbox/warren/internal/node/noderpc"
	"github.com/warren-sandbox/warren/internal/nodeauth"
	"github.com/warren-sandbox/warren/internal/nodereg"
	"github.com/warren-sandbox/warren/internal/sandbox"
	"github.com/warren-sandbox/warren/internal/store"
	"github.com/warren-sandbox/warren/internal/store/storetest"
	"github.com/warren-sandbox/warren/pkg/client"
)

const apiKey = "e2b_00112233445566778899aabbccddeeff00112233"

// startAPIReplica runs one `warren api` over dsn until the test ends and
// returns its base URL.
func startAPIReplica(t *testing.T, dsn string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, app.Options{Logger: slog.New(slog.DiscardHandler), Out: io.Discard}, Config{NodeCredentialKey: credentialKey,
			Settings: Settings{Listen: "127.0.0.1:0", DatabaseURL: dsn, APIKey: apiKey, AdminToken: "adm-0123456789abcdef0123456789abcdef", Ready: func(a string) { addr <- a }}})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("warren api: %v", err)
		}
	})
	select {
	case a := <-addr:
		return "http://" + a
	case err := <-done:
		done <- nil
		t.Fatalf("warren api ended: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("warren api did not start")
	}
	return ""
}

// metricsOf returns a replica's /metrics text.
func metricsOf(t *testing.T, base string) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+"/metrics", nil)
	req.Header.Set("X-Admin-Token", "adm-0123456789abcdef0123456789abcdef")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return string(body)
}

// TestAPIReplicasElectOneLeader: of two `warren api` replicas over one
// Postgres database exactly one leads (api_leader 1). A node that first
// registers through the follower makes the leader reconcile, which finds
// that a sandbox is gone from its node (node_lost): the leader counts the
// kill, the follower, which heard of the node, does not.
func TestAPIReplicasElectOneLeader(t *testing.T) {
	t.Parallel()
	dsn := storetest.PostgresSchema(t)
	fn := fakenode.New()
	mux := http.NewServeMux()
	mux.Handle(noderpc.NewHandler(fn, noderpc.Options{ResolveTemplate: fakeTemplates}))
	// One fake node behind two registrations (node-1, node-2): it takes
	// either's credential.
	var creds sync.Map
	nodeSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := creds.Load(nodeauth.Bearer(r.Header)); !ok {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(nodeSrv.Close) // after the replicas' clean-ups: they hold its watch streams
	replicas := []string{startAPIReplica(t, dsn), startAPIReplica(t, dsn)}
	tokens := map[string]string{}
	for _, id := range []string{"node-1", "node-2"} {
		tokens[id] = issueNodeToken(t, replicas[0], id)
		creds.Store(nodeauth.Credential(tokens[id], nodeauth.PurposeRPC), true)
	}

	var lead, follower string
	for deadline := time.Now().Add(time.Minute); lead == ""; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no replica leads")
		}
		var leaders []string
		for _, base := range replicas {
			if strings.Contains(metricsOf(t, base), "\napi_leader 1\n") {
				leaders = append(leaders, base)
			}
		}
		if len(leaders) > 1 {
			t.Fatalf("both replicas lead: %v", leaders)
		}
		if len(leaders) == 1 {
			lead = leaders[0]
		}
	}
	follower = replicas[0]
	if follower == lead {
		follower = replicas[1]
	}

	ctx := context.Background()
	beat := nodereg.Status{ID: "node-1", RPCAddress: nodeSrv.URL, ProxyAddress: "127.0.0.1:1", BootID: "boot-1", Capacity: store.NodeResources{VCPUs: 4, MemoryMB: 4096}}
	if _, err := (&nodereg.Client{APIURL: follower, Token: tokens["node-1"]}).Heartbeat(ctx, beat); err != nil {
		t.Fatal(err)
	}
	sb, err := client.New(follower, apiKey).Create(ctx, client.NewSandbox{TemplateID: "base"})
	if err != nil {
		t.Fatal(err)
	}
	// The node loses the sandbox without a word; the next reconcile finds out.
	if err := fn.Kill(ctx, sb.SandboxID, sandbox.KillRequest); err != nil {
		t.Fatal(err)
	}
	beat.ID, beat.BootID = "node-2", "boot-2"
	if _, err := (&nodereg.Client{APIURL: follower, Token: tokens["node-2"]}).Heartbeat(ctx, beat); err != nil {
		t.Fatal(err)
	}
	st := storetest.OpenPostgres(t, dsn)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		got, err := st.GetSandbox(ctx, sb.SandboxID)
		if err != nil {
			t.Fatal(err)
		}
		if got.State == sandbox.StateKilled {
			if got.KillReason != sandbox.KillNodeLost {
				t.Fatalf("kill reason %q, want node_lost", got.KillReason)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the sandbox its node lost is still running: nobody reconciled")
		}
	}
	const lost = `sandbox_killed_total{kill_reason="node_lost"} 1` + "\n"
	if !strings.Contains(metricsOf(t, lead), lost) {
		t.Error("the leader did not count the kill of its reconcile")
	}
	if strings.Contains(metricsOf(t, follower), lost) {
		t.Error("the follower reconciled")
	}
}
