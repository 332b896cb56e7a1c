package nodebuild_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	nodepb "github.com/warren-sandbox/warren/api/node"
	"github.com/warren-sandbox/warren/internal/awsauth"
	"github.com/warren-sandbox/warren/internal/builder"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/errdefs/errhttp"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/nodebuild"
	"github.com/warren-sandbox/warren/internal/store"
	"github.com/warren-sandbox/warren/internal/store/storetest"
	"github.com/warren-sandbox/warren/internal/templates"
)

// newRemote is the build service of warren api over a fresh Postgres
// schema, with the store for registering nodes.
func newRemote(t *testing.T) (*nodebuild.Remote, *templates.Catalog, *store.SQL, *httptest.Server) {
	t.Helper()
	st := storetest.Postgres(t)
	cat, err := templates.New(templates.Config{Store: st.Templates()})
	if err != nil {
		t.Fatal(err)
	}
	r, err := nodebuild.NewRemote(remoteConfig(nodebuild.RemoteConfig{Catalog: cat, Nodes: st}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	mux := http.NewServeMux()
	mux.Handle(r.LocateHandler())
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return r, cat, st, srv
}

func heartbeat(t *testing.T, st *store.SQL, id, rpc string, held ...string) {
	t.Helper()
	if _, err := st.HeartbeatNode(context.Background(), &store.Node{ID: id, RPCAddress: rpc, ProxyAddress: "127.0.0.1:1", BootID: "b", Version: "v",
		Capacity: store.NodeResources{VCPUs: 8, MemoryMB: 8192}, Templates: held}); err != nil {
		t.Fatal(err)
	}
}

// TestLocate: nodes ask the control plane where a build is with the node
// token only; the answer names the builder first, then other holders.
func TestLocate(t *testing.T) {
	t.Parallel()
	r, cat, st, srv := newRemote(t)
	ctx := context.Background()
	tm, b, err := r.CreateTemplate(ctx, templates.CreateRequest{TeamID: "team-a", Name: "mine"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = locateAt(srv.URL, token, b.ID)
	wantCode(t, "locate of a waiting build", err, connect.CodeFailedPrecondition)
	if _, err := cat.UpdateBuild(ctx, b.ID, func(b *templates.Build) error { b.NodeID = "n-2"; return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := cat.FinishBuild(ctx, b.ID, nil); err != nil {
		t.Fatal(err)
	}
	heartbeat(t, st, "n-1", "http://n-1", b.ID)
	heartbeat(t, st, "n-2", "http://n-2")
	heartbeat(t, st, "n-3", "http://n-3")
	for _, tok := range []string{"", "wrong-token-0123456789", "Bearer"} {
		src, err := locateAt(srv.URL, tok, b.ID)
		wantCode(t, "locate with token "+tok, err, connect.CodeUnauthenticated)
		if src != nil {
			t.Errorf("locate with token %q answered %+v", tok, src)
		}
	}
	for _, id := range []string{"../x", "nope"} {
		if _, err := locateAt(srv.URL, token, id); !isCode(err, connect.CodeInvalidArgument) && !isCode(err, connect.CodeNotFound) {
			t.Errorf("locate %q: %v, want invalid argument or not found", id, err)
		}
	}
	src, err := locateAt(srv.URL, token, b.ID)
	if err != nil {
		t.Fatalf("locate: %v", err)
	}
	if h := src.GetHolders(); src.GetTemplate().GetId() != tm.ID || src.GetBuild().GetId() != b.ID || len(h) != 2 || h[0].GetAddress() != "http://n-2" || h[1].GetAddress() != "http://n-1" {
		t.Fatalf("locate = %+v, want the builder n-2 then n-1", src)
	}
	loc := &nodebuild.Locator{APIURL: srv.URL, Token: token}
	if got, err := loc.Locate(ctx, b.ID); err != nil || got.GetBuild().GetId() != b.ID {
		t.Fatalf("Locator.Locate = %+v, %v", got, err)
	}
	if _, err := (&nodebuild.Locator{APIURL: srv.URL, Token: "wrong-token-0123456789"}).Locate(ctx, b.ID); !errdefs.IsUnauthorized(err) {
		t.Fatalf("Locator.Locate with a wrong token: %v, want unauthorized", err)
	}
	if _, err := loc.Locate(ctx, "../x"); !errdefs.IsInvalid(err) {
		t.Fatalf("Locator.Locate of a bad ID: %v", err)
	}
}

// TestStartBuildRefusals: what warren api cannot build says so, and
// leaves the build waiting.
func TestStartBuildRefusals(t *testing.T) {
	t.Parallel()
	r, cat, st, _ := newRemote(t)
	ctx := context.Background()
	tm, b, err := r.CreateTemplate(ctx, templates.CreateRequest{TeamID: "team-a", Name: "mine"})
	if err != nil {
		t.Fatal(err)
	}
	start := func(team string, spec builder.Spec) error {
		_, err := r.StartBuild(ctx, builder.StartRequest{TeamID: team, TemplateID: tm.ID, BuildID: b.ID, Spec: spec})
		return err
	}
	run := builder.Spec{Steps: []builder.Step{{Type: builder.StepRun, Args: []string{"true"}}}}
	if err := start("team-a", run); !errdefs.IsUnavailable(err) || errhttp.Message(err) != "no ready node to run the build on" {
		t.Errorf("with no node: %v (client sees %q)", err, errhttp.Message(err))
	}
	if err := start("team-b", run); !errdefs.IsNotFound(err) && !errors.Is(err, errdefs.ErrForbidden) {
		t.Errorf("another team's start: %v", err)
	}
	if _, _, err := r.Files(ctx, "team-a", tm.ID, "abc"); !errdefs.IsUnavailable(err) {
		t.Errorf("upload check with no node: %v, want unavailable", err)
	}
	if _, _, err := r.Files(ctx, "team-a", tm.ID, "../x"); !errdefs.IsInvalid(err) {
		t.Errorf("upload check of a bad hash: %v, want invalid", err)
	}
	if err := start("team-a", builder.Spec{Steps: []builder.Step{{Type: builder.StepRun}}}); !errdefs.IsInvalid(err) {
		t.Errorf("a bad step: %v, want invalid", err)
	}
	// A node that refuses (here: nothing listens) leaves the build waiting.
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	heartbeat(t, st, "n-1", dead.URL)
	if err := start("team-a", run); !errdefs.IsUnavailable(err) {
		t.Errorf("with the only node down: %v, want unavailable", err)
	}
	if got, err := cat.Build(ctx, b.ID); err != nil || got.Status != templates.BuildWaiting || got.NodeID != "" {
		t.Fatalf("after refusals the build is %+v, %v; want waiting on no node", got, err)
	}
}

// roundTrip is m through its binary form.
func roundTrip[M proto.Message](t *testing.T, m, into M) M {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := proto.Unmarshal(b, into); err != nil {
		t.Fatal(err)
	}
	return into
}

// TestRegistryAuthTravels: the credentials of a private base image reach
// the node with the build, apart from the spec (builder.Spec's own
// encoding leaves them out).
func TestRegistryAuthTravels(t *testing.T) {
	t.Parallel()
	for _, a := range []*builder.RegistryAuth{
		nil,
		{Username: "u", Password: "p"},
		{ECR: &awsauth.ECR{Credentials: awsauth.Credentials{AccessKeyID: "AKIA", SecretAccessKey: "s", SessionToken: "tok"}, Region: "eu-west-1"}},
	} {
		spec := builder.Spec{FromImage: "reg.example/x:1", RegistryAuth: a}
		got := roundTrip(t, &nodepb.StartBuildRequest{Spec: nodebuild.SpecToProto(spec), RegistryAuth: nodebuild.AuthToProto(a)}, &nodepb.StartBuildRequest{})
		if nodebuild.SpecOf(got.GetSpec()).RegistryAuth != nil {
			t.Fatal("the spec carried credentials itself")
		}
		back := nodebuild.AuthOf(got.GetRegistryAuth())
		switch {
		case a == nil && back != nil, a != nil && back == nil:
			t.Fatalf("auth %+v came back as %+v", a, back)
		case a == nil:
		case back.Username != a.Username || back.Password != a.Password || (a.ECR == nil) != (back.ECR == nil):
			t.Fatalf("auth %+v came back as %+v", a, back)
		case a.ECR != nil && (back.ECR.Credentials != a.ECR.Credentials || back.ECR.Region != a.ECR.Region):
			t.Fatalf("ECR %+v came back as %+v", a.ECR, back.ECR)
		}
	}
}

// TestWireCarriesTeamAndOrigin: what the build service and the pullers
// need of a build crosses the wire's messages both ways: the build's team
// limits (the node's build slots and template storage are shared by
// them), the disk a build took (its team's storage, recorded by the
// control plane), a sandbox snapshot's origin (a puller that lost it
// would start the snapshot's build cold), the artifacts' digests and the
// snapshot's host.
func TestWireCarriesTeamAndOrigin(t *testing.T) {
	t.Parallel()
	spec := builder.Spec{FromImage: "reg.example/x:1", Team: builder.TeamLimits{Builds: 2, StorageMB: 300},
		Steps: []builder.Step{{Type: builder.StepCopy, Args: []string{"a", "/a"}, FilesHash: "h1", Force: true, Expand: true}}, StartCmd: "s", ReadyCmd: "r"}
	origin := &templates.SandboxSnapshotOrigin{SandboxID: "sb1", TeamID: "team-a", CreatedAt: time.Unix(1700000000, 0).UTC(), VolumePaths: []string{"/data"}}
	host := &nodeapi.SnapshotHost{Runtime: "runsc x", Envd: "e", CPUFlags: []string{"fpu"}, VCPUs: 2, MemoryMB: 512, TmpMB: 256, DiskMB: 1024}
	b := &templates.Build{ID: "7c1d2e3f-4a5b-4c6d-8e7f-9a0b1c2d3e4f", TemplateID: "tmplaaaaaaaaaaaaaaaa", Status: templates.BuildReady,
		DiskBytes: 12345, SandboxSnapshot: origin, RootFSSHA256: "aa", RootFSSize: 1, SnapshotSHA256: "bb", SnapshotSize: 2, SnapshotHost: host,
		Env: map[string]string{"K": "v"}, User: "u", Workdir: "/w", Tags: []string{"default"}, Reason: &templates.Reason{Message: "m", Step: "1"},
		CreatedAt: time.Unix(1700000001, 0).UTC(), FinishedAt: time.Unix(1700000002, 0).UTC()}
	got := roundTrip(t, &nodepb.StartBuildRequest{Spec: nodebuild.SpecToProto(spec), Build: nodebuild.BuildToProto(b)}, &nodepb.StartBuildRequest{})
	if back := nodebuild.SpecOf(got.GetSpec()); !reflect.DeepEqual(back, spec) {
		t.Errorf("spec %+v came back as %+v", spec, back)
	}
	if rec := nodebuild.BuildRecord(got.GetBuild()); !reflect.DeepEqual(rec, b) {
		t.Errorf("build %+v came back as %+v", b, rec)
	}
	if plain := nodebuild.BuildRecord(nodebuild.BuildToProto(&templates.Build{ID: b.ID})); plain.SandboxSnapshot != nil || plain.SnapshotHost != nil || plain.Reason != nil {
		t.Errorf("a template build came back as a sandbox snapshot: %+v", plain)
	}
	tm := &templates.Template{ID: b.TemplateID, TeamID: "team-a", Public: true, Tags: map[string]templates.Tag{"default": {BuildID: b.ID, CreatedAt: b.FinishedAt}},
		CPUCount: 2, MemoryMB: 512, DiskMB: 1024}
	if back := nodebuild.TemplateRecord(roundTrip(t, nodebuild.TemplateToProto(tm), &nodepb.CatalogTemplate{})); !reflect.DeepEqual(back, tm) {
		t.Errorf("template %+v came back as %+v", tm, back)
	}
}

// TestBaseRecord: warren api's catalog names base (every team may use
// it, by name, as `FROM base` does), and a create of it names each
// node's own base (build ID equal to the template's).
func TestBaseRecord(t *testing.T) {
	t.Parallel()
	r, cat, _, _ := newRemote(t)
	ctx := context.Background()
	for range 2 { // a second replica starting
		if err := cat.EnsureBaseRecord(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for _, team := range []string{"team-a", "team-b"} {
		nt, err := r.Resolve(ctx, team, "base")
		if err != nil || nt.ID != templates.BaseID || nt.BuildID != templates.BaseID || nt.RootFS != "" || nt.User != templates.DefaultUser {
			t.Fatalf("Resolve(%s, base) = %+v, %v", team, nt, err)
		}
		if tm, err := cat.Find(ctx, team, "base"); err != nil || tm.ID != templates.BaseID {
			t.Fatalf("Find(%s, base) = %+v, %v", team, tm, err)
		}
	}
	if err := cat.Delete(ctx, "team-a", "base"); err == nil {
		t.Fatal("a team deleted base")
	}
}

// TestBuildNodeHasRoom: a build goes to a ready node with room for it
// beside the sandboxes placement put there, before a node with more
// memory free but too few vCPUs.
func TestBuildNodeHasRoom(t *testing.T) {
	t.Parallel()
	r, cat, st, _ := newRemote(t)
	ctx := context.Background()
	cpu := 4
	_, b, err := r.CreateTemplate(ctx, templates.CreateRequest{TeamID: "team-a", Name: "mine", CPUCount: &cpu})
	if err != nil {
		t.Fatal(err)
	}
	heartbeat(t, st, "n-big", "http://127.0.0.1:1")
	heartbeat(t, st, "n-small", "http://127.0.0.1:1")
	heartbeat(t, st, "n-cordoned", "http://127.0.0.1:1")
	must(t, st.SetNodeAdminStatus(ctx, "n-cordoned", store.NodeCordoned))
	// n-big: memory free, its vCPUs taken; n-small: little memory used.
	must(t, st.ReserveOnNode(ctx, "n-big", "sb-1", store.NodeResources{VCPUs: 6, MemoryMB: 512}))
	must(t, st.ReserveOnNode(ctx, "n-small", "sb-2", store.NodeResources{VCPUs: 1, MemoryMB: 2048}))
	// The upload check pins the build to the node it chose; the node
	// itself does not answer here.
	if _, _, err := r.Files(ctx, "team-a", b.TemplateID, "h1"); err == nil {
		t.Fatal("the upload check succeeded against a node that does not listen")
	}
	if got, err := cat.Build(ctx, b.ID); err != nil || got.NodeID != "n-small" {
		t.Fatalf("build pinned to %q (%v), want n-small: n-big has 2 of 8 vCPUs free for a 4-vCPU build", got.NodeID, err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
