package nodebuild_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/warren-sandbox/warren/internal/builder"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/errdefs/errhttp"
	"github.com/warren-sandbox/warren/internal/nodebuild"
	"github.com/warren-sandbox/warren/internal/store"
	"github.com/warren-sandbox/warren/internal/templates"
)

// TestQuotaRefusalIsNotRetried: a node's refusal of a build for its
// team's quota there (its templates take the team's storage: 429,
// ErrExhausted) reaches the client as that refusal, with the node's
// message; the build is not sent to the next node as if the first were
// down, and stays waiting.
func TestQuotaRefusalIsNotRetried(t *testing.T) {
	t.Parallel()
	r, cat, st, _ := newRemote(t)
	ctx := context.Background()
	full, other := newPeer(t, nil), newPeer(t, nil)
	// team-a's templates on full take 10 MiB.
	b := build
	b.DiskBytes = 10 << 20
	must(t, full.local.Catalog.Mirror(ctx, &tmpl, &b))
	heartbeat(t, st, "n-full", full.srv.URL)
	heartbeat(t, st, "n-other", other.srv.URL)
	// n-full has the more memory free: the build goes there first.
	must(t, st.ReserveOnNode(ctx, "n-other", "sb-1", store.NodeResources{VCPUs: 1, MemoryMB: 2048}))
	tm, wb, err := r.CreateTemplate(ctx, templates.CreateRequest{TeamID: "team-a", Name: "child"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.StartBuild(ctx, builder.StartRequest{TeamID: "team-a", TemplateID: tm.ID, BuildID: wb.ID,
		Spec: builder.Spec{FromImage: "reg.example/x:1", Team: builder.TeamLimits{StorageMB: 1}}})
	if !errdefs.IsExhausted(err) || errdefs.IsUnavailable(err) || errhttp.Status(err) != http.StatusTooManyRequests {
		t.Fatalf("a build its team's storage on the node refuses: %v (status %d), want 429 exhausted", err, errhttp.Status(err))
	}
	if msg := errhttp.Message(err); !strings.Contains(msg, "the team's templates take 10 MiB") || strings.Contains(msg, "http") {
		t.Errorf("the client is told %q, want the node's reason and no address", msg)
	}
	if _, err := other.local.Catalog.Build(ctx, wb.ID); !errdefs.IsNotFound(err) {
		t.Errorf("the refused build reached the other node: %v", err)
	}
	if got, err := cat.Build(ctx, wb.ID); err != nil || got.Status != templates.BuildWaiting || got.NodeID != "" {
		t.Fatalf("after the refusal the build is %+v, %v; want waiting on no node", got, err)
	}
}

// TestCredentialRefusalTriesTheNextNode: a node that refuses the control
// plane's credential (its token rotated, say) is unavailable to it, not a
// refusal of the tenant's build: the build goes to the next node, and the
// client is never told "unauthorized".
func TestCredentialRefusalTriesTheNextNode(t *testing.T) {
	t.Parallel()
	r, cat, st, _ := newRemote(t)
	ctx := context.Background()
	rotated := newPeer(t, nil, func(c *nodebuild.NodeConfig) { c.Credential = "another-credential-0123456789" })
	other := newPeer(t, nil)
	heartbeat(t, st, "n-rotated", rotated.srv.URL)
	heartbeat(t, st, "n-other", other.srv.URL)
	must(t, st.ReserveOnNode(ctx, "n-other", "sb-1", store.NodeResources{VCPUs: 1, MemoryMB: 2048}))
	tm, wb, err := r.CreateTemplate(ctx, templates.CreateRequest{TeamID: "team-a", Name: "child"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.StartBuild(ctx, builder.StartRequest{TeamID: "team-a", TemplateID: tm.ID, BuildID: wb.ID,
		Spec: builder.Spec{FromImage: "reg.example/x:1"}}); err != nil {
		t.Fatalf("start with the first node refusing the credential: %v", err)
	}
	if got, err := cat.Build(ctx, wb.ID); err != nil || got.NodeID != "n-other" {
		t.Fatalf("the build is %+v, %v; want it on n-other", got, err)
	}
	if _, err := rotated.local.Catalog.Build(ctx, wb.ID); !errdefs.IsNotFound(err) {
		t.Errorf("the node that refused the credential recorded the build: %v", err)
	}
	// With no other node, the client is told the nodes are unavailable.
	_, wb2, err := r.CreateTemplate(ctx, templates.CreateRequest{TeamID: "team-a", Name: "child"})
	if err != nil {
		t.Fatal(err)
	}
	must(t, st.SetNodeAdminStatus(ctx, "n-other", store.NodeCordoned))
	_, err = r.StartBuild(ctx, builder.StartRequest{TeamID: "team-a", TemplateID: tm.ID, BuildID: wb2.ID, Spec: builder.Spec{FromImage: "reg.example/x:1"}})
	if !errdefs.IsUnavailable(err) || errdefs.IsUnauthorized(err) || errhttp.Status(err) != http.StatusServiceUnavailable {
		t.Fatalf("start on the refusing node alone: %v (status %d), want 503 unavailable", err, errhttp.Status(err))
	}
}
