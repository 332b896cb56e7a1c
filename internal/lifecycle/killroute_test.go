package lifecycle_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/lifecycle"
	"github.com/warren-sandbox/warren/internal/lifecycle/fakenode"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/sandbox"
	"github.com/warren-sandbox/warren/internal/store/storetest"
)

// slowKill is a node whose kill takes until release is closed (a runtime
// tearing a sandbox down), the sandbox still listed meanwhile, and fails
// with fail when set.
type slowKill struct {
	*fakenode.Node
	entered chan string
	release chan struct{}
	fail    error
}

func (n *slowKill) Kill(ctx context.Context, id string, reason sandbox.KillReason) error {
	n.entered <- id
	<-n.release
	if n.fail != nil {
		return n.fail
	}
	return n.Node.Kill(ctx, id, reason)
}

func (n *slowKill) KillExecution(ctx context.Context, id, _ string, reason sandbox.KillReason) error {
	return n.Kill(ctx, id, reason)
}

// TestRouteDuringKill: once a kill has begun, the sandbox is not routed
// (not found: the proxy's 502 "The sandbox was not found"), from the
// cache or not, while its node still tears it down; upstream takes a
// sandbox out of routing before it stops it. The SDK's health check after
// a command's stream broke in a kill reads that 502 as "killed" (a
// TimeoutError); a route to the dying sandbox would hang instead. A kill
// that fails leaves the sandbox routed.
func TestRouteDuringKill(t *testing.T) {
	t.Parallel()
	for _, cached := range []bool{true, false} {
		name := map[bool]string{true: "cached", false: "uncached"}[cached]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				ctx := context.Background()
				st := storetest.SQLite(t)
				n := &slowKill{Node: fakenode.New(), entered: make(chan string), release: make(chan struct{})}
				cfg := lifecycle.Config{Store: st, Node: n, SandboxChanges: st.WatchSandboxes}
				if !cached {
					cfg.RouteCacheTTL = -1
				}
				m, err := lifecycle.New(cfg)
				if err != nil {
					t.Fatal(err)
				}
				runCtx, stop := context.WithCancel(ctx)
				ran := make(chan error, 1)
				go func() { ran <- m.Run(runCtx) }()
				defer func() { stop(); <-ran }()
				synctest.Wait() // the feed is live
				sb, err := m.Create(ctx, lifecycle.CreateParams{TeamID: "team", Template: nodeapi.Template{ID: "base"}, Timeout: time.Hour})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := m.Route(ctx, sb.ID, nil); err != nil {
					t.Fatal(err)
				}

				// A kill that fails: routed again afterwards.
				n.fail = errors.New("runtime said no")
				failed := make(chan error, 1)
				go func() { failed <- m.Kill(ctx, "team", sb.ID, sandbox.KillRequest) }()
				<-n.entered
				if _, err := m.Route(ctx, sb.ID, nil); !errdefs.IsNotFound(err) {
					t.Errorf("route while the kill runs: %v, want not found", err) // not Fatal: the kill waits
				}
				n.release <- struct{}{}
				if err := <-failed; err == nil {
					t.Fatal("kill succeeded, want the node's error")
				}
				if _, err := m.Route(ctx, sb.ID, nil); err != nil {
					t.Fatalf("route after a failed kill: %v", err)
				}

				n.fail = nil
				done := make(chan error, 1)
				go func() { done <- m.Kill(ctx, "team", sb.ID, sandbox.KillRequest) }()
				<-n.entered
				if _, err := m.Route(ctx, sb.ID, nil); !errdefs.IsNotFound(err) {
					t.Errorf("route while the kill runs: %v, want not found", err) // not Fatal: the kill waits
				}
				close(n.release)
				if err := <-done; err != nil {
					t.Fatal(err)
				}
				if _, err := m.Route(ctx, sb.ID, nil); !errdefs.IsNotFound(err) {
					t.Fatalf("route of a killed sandbox: %v, want not found", err)
				}
			})
		})
	}
}
