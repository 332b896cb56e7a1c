package nodebuild_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	nodepb "github.com/warren-sandbox/warren/api/node"
	"github.com/warren-sandbox/warren/internal/nodeauth"
	"github.com/warren-sandbox/warren/internal/nodebuild"
	"github.com/warren-sandbox/warren/internal/nodereg"
	"github.com/warren-sandbox/warren/internal/sandbox"
	"github.com/warren-sandbox/warren/internal/store"
	"github.com/warren-sandbox/warren/internal/store/storetest"
	"github.com/warren-sandbox/warren/internal/templates"
)

const credentialKey = "nodebuild-test-credential-key-0123456789"

// TestLocateOnlyWhatTheNodeNeeds: a node asks the control plane about a
// build with its own token. It gets the build and where to pull it (with
// a grant each holder takes) only when a sandbox of it is placed there;
// about a build it only holds, whether it is current; about any other,
// nothing (permission denied). A revoked or missing token is
// unauthenticated.
func TestLocateOnlyWhatTheNodeNeeds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.Postgres(t)
	creds, err := nodereg.NewCredentials(st, credentialKey, nil)
	if err != nil {
		t.Fatal(err)
	}
	cat, err := templates.New(templates.Config{Store: st.Templates()})
	if err != nil {
		t.Fatal(err)
	}
	r, err := nodebuild.NewRemote(nodebuild.RemoteConfig{Catalog: cat, Nodes: st, Authenticate: creds.Authenticate, Grant: creds.Grant,
		Credential: func(ctx context.Context, id string) (string, error) {
			return creds.Credential(ctx, id, nodeauth.PurposeRPC)
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	mux := http.NewServeMux()
	mux.Handle(r.LocateHandler())
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	tokens := map[string]string{}
	for _, id := range []string{"n-1", "n-2", "n-3"} {
		tokens[id], _, err = creds.Issue(ctx, id, "")
		if err != nil {
			t.Fatal(err)
		}
	}
	tm, b, err := r.CreateTemplate(ctx, templates.CreateRequest{TeamID: "team-a", Name: "mine"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cat.UpdateBuild(ctx, b.ID, func(b *templates.Build) error { b.NodeID = "n-1"; return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := cat.FinishBuild(ctx, b.ID, nil); err != nil {
		t.Fatal(err)
	}
	heartbeat(t, st, "n-1", "https://n-1:3100", b.ID)
	heartbeat(t, st, "n-2", "https://n-2:3100")
	heartbeat(t, st, "n-3", "https://n-3:3100")
	locate := func(tok string) (*nodepb.BuildSource, error) { return locateAt(srv.URL, tok, b.ID) }

	_, err = locate(tokens["n-2"])
	wantCode(t, "a node that needs nothing of the build", err, connect.CodePermissionDenied)
	// A sandbox of the build placed on n-3: n-3 needs it.
	if err := st.CreateSandbox(ctx, &store.Sandbox{ID: "sb-on-n3", TeamID: "team-a", TemplateID: tm.ID, State: sandbox.StateStarting,
		Spec: store.Spec{NodeID: "n-3", BuildID: b.ID, ExecutionID: "e1"}}); err != nil {
		t.Fatal(err)
	}
	src, err := locate(tokens["n-3"])
	if err != nil || src.GetBuild().GetId() != b.ID || len(src.GetHolders()) != 1 {
		t.Fatalf("the node that needs the build: %+v, %v", src, err)
	}
	h := src.GetHolders()[0]
	pullKey := func(id string) string { return nodeauth.Credential(tokens[id], nodeauth.PurposePull) }
	if who, err := nodeauth.CheckGrant(pullKey("n-1"), b.ID, h.GetGrant(), time.Now()); h.GetAddress() != "https://n-1:3100" || err != nil || who != "n-3" {
		t.Fatalf("the holder %+v: grant %q %v; want n-1 taking a grant for n-3", h, who, err)
	}
	if _, err := nodeauth.CheckGrant(pullKey("n-2"), b.ID, h.GetGrant(), time.Now()); err == nil {
		t.Error("n-1's grant opens n-2")
	}
	if _, err := nodeauth.CheckGrant(pullKey("n-1"), "another-build", h.GetGrant(), time.Now()); err == nil {
		t.Error("the grant opens another build")
	}
	// The builder holds it: whether it is current, and nothing of it.
	src, err = locate(tokens["n-1"])
	if err != nil || !src.GetCurrent() || src.GetBuild() != nil || src.GetTemplate() != nil || len(src.GetHolders()) != 0 {
		t.Fatalf("the builder's question: %+v, %v; want current and nothing else", src, err)
	}
	for name, tok := range map[string]string{"none": "", "the API's credential of n-3": nodeauth.Credential(tokens["n-3"], nodeauth.PurposeRPC)} {
		_, err := locate(tok)
		wantCode(t, name, err, connect.CodeUnauthenticated)
	}
	recs, _ := creds.Tokens(ctx, "n-3")
	if _, err := creds.Revoke(ctx, "n-3", recs[0].ID); err != nil {
		t.Fatal(err)
	}
	_, err = locate(tokens["n-3"])
	wantCode(t, "a revoked token", err, connect.CodeUnauthenticated)
}

// TestLocateSandboxSnapshot: a sandbox snapshot's build (taken on n-1,
// which holds it) travels as a template build does, under the same rule:
// a node learns where it is, with a grant from its holder, only once a
// create of it is placed there, and the answer marks it as a sandbox
// snapshot (the puller restores it, never starts it cold); a node asked
// for nothing of it gets 403.
func TestLocateSandboxSnapshot(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.Postgres(t)
	creds, err := nodereg.NewCredentials(st, credentialKey, nil)
	if err != nil {
		t.Fatal(err)
	}
	cat, err := templates.New(templates.Config{Store: st.Templates()})
	if err != nil {
		t.Fatal(err)
	}
	r, err := nodebuild.NewRemote(nodebuild.RemoteConfig{Catalog: cat, Nodes: st, Authenticate: creds.Authenticate, Grant: creds.Grant})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	mux := http.NewServeMux()
	mux.Handle(r.LocateHandler())
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	tokens := map[string]string{}
	for _, id := range []string{"n-1", "n-2", "n-3"} {
		if tokens[id], _, err = creds.Issue(ctx, id, ""); err != nil {
			t.Fatal(err)
		}
	}
	tm, b, err := r.CreateTemplate(ctx, templates.CreateRequest{TeamID: "team-a", Name: "snap"})
	if err != nil {
		t.Fatal(err)
	}
	origin := &templates.SandboxSnapshotOrigin{SandboxID: "sb-source", TeamID: "team-a", CreatedAt: time.Now().UTC().Truncate(time.Second)}
	if _, err := cat.UpdateBuild(ctx, b.ID, func(b *templates.Build) error {
		b.NodeID, b.SandboxSnapshot = "n-1", origin
		b.RootFSSHA256, b.RootFSSize, b.SnapshotSHA256, b.SnapshotSize = strings.Repeat("a", 64), 10, strings.Repeat("b", 64), 20
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := cat.FinishBuild(ctx, b.ID, nil); err != nil {
		t.Fatal(err)
	}
	heartbeat(t, st, "n-1", "https://n-1:3100", b.ID)
	heartbeat(t, st, "n-2", "https://n-2:3100")
	heartbeat(t, st, "n-3", "https://n-3:3100")
	locate := func(id string) (*nodepb.BuildSource, error) { return locateAt(srv.URL, tokens[id], b.ID) }
	for _, id := range []string{"n-2", "n-3"} {
		_, err := locate(id)
		wantCode(t, id+", asked to restore nothing of it", err, connect.CodePermissionDenied)
	}
	// A create of the snapshot placed on n-2.
	if err := st.CreateSandbox(ctx, &store.Sandbox{ID: "sb-restore", TeamID: "team-a", TemplateID: tm.ID, State: sandbox.StateStarting,
		Spec: store.Spec{NodeID: "n-2", BuildID: b.ID, ExecutionID: "e1"}}); err != nil {
		t.Fatal(err)
	}
	src, err := locate("n-2")
	if err != nil || src.GetBuild().GetId() != b.ID || len(src.GetHolders()) != 1 {
		t.Fatalf("the node asked to restore it: %+v, %v", src, err)
	}
	if got := nodebuild.BuildRecord(src.GetBuild()).SandboxSnapshot; got == nil || !reflect.DeepEqual(*got, *origin) {
		t.Errorf("the answer's build is marked %+v, want the sandbox snapshot's origin %+v", got, origin)
	}
	h := src.GetHolders()[0]
	if who, err := nodeauth.CheckGrant(nodeauth.Credential(tokens["n-1"], nodeauth.PurposePull), b.ID, h.GetGrant(), time.Now()); h.GetAddress() != "https://n-1:3100" || err != nil || who != "n-2" {
		t.Fatalf("the holder %+v: grant for %q, %v; want n-1's grant for n-2", h, who, err)
	}
	_, err = locate("n-3")
	wantCode(t, "n-3 once n-2 restores it", err, connect.CodePermissionDenied)
}

// TestArtifactsNeedAGrant: a node's artifacts go to the control plane
// and to a peer with a grant for that build, from this node; a peer's own
// token or credentials, or a grant for another build, from another node
// or out of date, get nothing. A grant opens no other call.
func TestArtifactsNeedAGrant(t *testing.T) {
	t.Parallel()
	const holderToken, peerToken = "wnt_00000000000000aa_" + "holder", "wnt_00000000000000bb_" + "peer"
	holderPull := nodeauth.Credential(holderToken, nodeauth.PurposePull)
	p := newPeer(t, nil, func(c *nodebuild.NodeConfig) {
		c.Credential, c.PullKey = nodeauth.Credential(holderToken, nodeauth.PurposeRPC), holderPull
	})
	p.holdBuild(t)
	grant := func(key, id string, at time.Time) map[string]string {
		return map[string]string{nodeauth.HeaderGrant: nodeauth.Grant(key, id, "peer", at)}
	}
	later := time.Now().Add(time.Minute)
	for _, kind := range []nodepb.ArtifactKind{nodepb.ArtifactKind_ARTIFACT_KIND_ROOTFS, nodepb.ArtifactKind_ARTIFACT_KIND_SNAPSHOT} {
		for name, h := range map[string]map[string]string{
			"nothing":                      nil,
			"the peer's token":             bearer(peerToken),
			"the peer's RPC credential":    bearer(nodeauth.Credential(peerToken, nodeauth.PurposeRPC)),
			"the holder's pull key":        bearer(holderPull),
			"a grant for another build":    grant(holderPull, "5d6c3b8e-1f6a-4c2e-9d7b-2a1e5f4c3b2a", later),
			"a grant from another holder":  grant(nodeauth.Credential(peerToken, nodeauth.PurposePull), build.ID, later),
			"an expired grant":             grant(holderPull, build.ID, time.Now().Add(-time.Second)),
			"a grant, tampered requester":  {nodeauth.HeaderGrant: nodeauth.Grant(holderPull, build.ID, "peer", later) + "x"},
			"the old shared token's style": bearer(token),
		} {
			_, data, err := pull(p.srv.URL, h, build.ID, kind)
			wantCode(t, kind.String()+" with "+name, err, connect.CodeUnauthenticated)
			if len(data) != 0 {
				t.Errorf("%s with %s: %d bytes served", kind, name, len(data))
			}
		}
	}
	if _, _, err := pull(p.srv.URL, grant(holderPull, build.ID, later), build.ID, nodepb.ArtifactKind_ARTIFACT_KIND_ROOTFS); err != nil {
		t.Errorf("rootfs with a grant: %v", err)
	}
	if _, _, err := pull(p.srv.URL, bearer(nodeauth.Credential(holderToken, nodeauth.PurposeRPC)), build.ID, nodepb.ArtifactKind_ARTIFACT_KIND_ROOTFS); err != nil {
		t.Errorf("rootfs with the control plane's credential: %v", err)
	}
	// The grant opens no other call, nor with the holder's pull key.
	for _, h := range []map[string]string{grant(holderPull, build.ID, later), bearer(holderPull)} {
		for _, proc := range procedures() {
			if proc.Name() == "PullArtifact" {
				continue
			}
			if got := callRaw(t, p.srv.URL, proc, h); got != connect.CodeUnauthenticated {
				t.Errorf("%s with %v: %v, want unauthenticated", proc.Name(), h, got)
			}
		}
	}
}
