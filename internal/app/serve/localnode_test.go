package serve

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"runtime"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/app"
	"github.com/warren-sandbox/warren/internal/app/apirole"
	"github.com/warren-sandbox/warren/internal/app/noderole"
	"github.com/warren-sandbox/warren/internal/nodereg"
	"github.com/warren-sandbox/warren/pkg/client"
)

// TestServeListsLocalNode: warren serve lists its one in-process node in
// GET /admin/nodes (admin token only), ready, with the host's CPUs and the
// sandboxes it runs.
func TestServeListsLocalNode(t *testing.T) {
	t.Parallel()
	const key = "e2b_00112233445566778899aabbccddeeff00112233"
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, app.Options{Logger: slog.New(slog.DiscardHandler), Out: io.Discard}, Config{
			Settings: apirole.Settings{Listen: "127.0.0.1:0", APIKey: key, AdminToken: "adm-0123456789abcdef0123456789abcdef",
				Ready: func(a string) { addr <- a }},
			Host: noderole.Host{DataDir: t.TempDir(), Driver: "fake", Node: noderole.Tuning{WatchdogInterval: -1}},
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	var base string
	select {
	case a := <-addr:
		base = "http://" + a
	case err := <-done:
		t.Fatalf("serve ended: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("serve did not start")
	}
	if _, err := client.New(base, key).Create(ctx, client.NewSandbox{TemplateID: "base"}); err != nil {
		t.Fatal(err)
	}
	get := func(header, value string) (int, []nodereg.NodeInfo) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/admin/nodes", nil)
		req.Header.Set(header, value)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out []nodereg.NodeInfo
		json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out
	}
	if code, _ := get("X-Admin-Token", "wrong"); code != http.StatusUnauthorized {
		t.Errorf("wrong admin token: %d", code)
	}
	if code, _ := get("X-API-Key", key); code != http.StatusForbidden {
		t.Errorf("a team's API key: %d", code)
	}
	code, nodes := get("X-Admin-Token", "adm-0123456789abcdef0123456789abcdef")
	if code != http.StatusOK || len(nodes) != 1 {
		t.Fatalf("GET /admin/nodes: %d, %+v", code, nodes)
	}
	n := nodes[0]
	if n.ID != LocalNodeID || n.Status != "ready" || n.Capacity.VCPUs != int64(runtime.NumCPU()) || n.Sandboxes != 1 || n.BootID == "" || n.LastHeartbeat.IsZero() {
		t.Fatalf("local node: %+v", n)
	}
}
