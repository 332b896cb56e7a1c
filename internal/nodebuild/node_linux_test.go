package nodebuild_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"

	nodepb "github.com/warren-sandbox/warren/api/node"
	"github.com/warren-sandbox/warren/internal/builder"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/nodebuild"
	"github.com/warren-sandbox/warren/internal/templates"
)

// peer is one node's catalog and BuildService, served over real HTTP.
type peer struct {
	local *builder.Local
	node  *nodebuild.Node
	srv   *httptest.Server
	reg   *prometheus.Registry
	// rootfsHits and snapshotHits count the artifact streams served.
	rootfsHits, snapshotHits atomic.Int64
}

func newPeer(t *testing.T, locate nodebuild.Locate, opts ...func(*nodebuild.NodeConfig)) *peer {
	t.Helper()
	local, err := builder.OpenLocal(builder.LocalConfig{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(local.Service.Close)
	reg := prometheus.NewRegistry()
	cfg := nodebuild.NodeConfig{Catalog: local.Catalog, Service: local.Service, Credential: token, PullKey: pullKey, Locate: locate, Registry: reg}
	for _, o := range opts {
		o(&cfg)
	}
	n, err := nodebuild.NewNode(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p := &peer{local: local, node: n, reg: reg}
	mux := http.NewServeMux()
	mux.Handle(n.Handler())
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch artifactKind(r) {
		case nodepb.ArtifactKind_ARTIFACT_KIND_ROOTFS:
			p.rootfsHits.Add(1)
		case nodepb.ArtifactKind_ARTIFACT_KIND_SNAPSHOT:
			p.snapshotHits.Add(1)
		}
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(p.srv.Close)
	return p
}

// team-a's private template and a ready build of it, whose root
// filesystem (a file, a symbolic link, a hard link, a directory) is on p.
var (
	tmpl  = templates.Template{ID: "tmplaaaaaaaaaaaaaaaa", TeamID: "team-a", Aliases: []string{"mine"}}
	build = templates.Build{ID: "0d6c3b8e-1f6a-4c2e-9d7b-2a1e5f4c3b2a", TemplateID: "tmplaaaaaaaaaaaaaaaa", Status: templates.BuildReady, User: "user", Workdir: "/home/user"}
)

func (p *peer) holdBuild(t *testing.T) {
	t.Helper()
	rootfs := filepath.Join(p.local.Catalog.BuildDir(build.ID), "rootfs")
	must(t, os.MkdirAll(filepath.Join(rootfs, "etc"), 0o755))
	must(t, os.WriteFile(filepath.Join(rootfs, "hi"), []byte("hi\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(rootfs, "etc", "big"), bytes.Repeat([]byte("warren "), 50000), 0o600))
	must(t, os.Symlink("/hi", filepath.Join(rootfs, "hi-link")))
	must(t, os.Link(filepath.Join(rootfs, "hi"), filepath.Join(rootfs, "etc", "hi-hard")))
	b := build
	b.RootFSDir = rootfs
	must(t, p.local.Catalog.Mirror(context.Background(), &tmpl, &b))
}

// counter returns the value of the counter name{result=result} ("" for
// a counter without labels).
func (p *peer) counter(t *testing.T, name, result string) float64 {
	t.Helper()
	mfs, err := p.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if result == "" || len(m.GetLabel()) == 1 && m.GetLabel()[0].GetValue() == result {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// sourceFrom is the control plane's answer naming holder as the node
// that holds the build, with the digest holder's export recorded.
func sourceFrom(t *testing.T, holder *peer, addr string) nodebuild.Locate {
	return func(ctx context.Context, id string) (*nodepb.BuildSource, error) {
		b, err := holder.node.Export(ctx, id)
		if err != nil {
			return nil, err
		}
		t, err := holder.local.Catalog.Store().GetTemplate(ctx, b.TemplateID)
		if err != nil {
			return nil, err
		}
		return nodebuild.SourceOf(t, b, grantTo(addr, id)), nil
	}
}

// TestCallsNeedTheNodeToken: without the node token nothing of a build
// is served (a tenant reaching a node's RPC port reads no template), by
// any call of the BuildService.
func TestCallsNeedTheNodeToken(t *testing.T) {
	t.Parallel()
	p := newPeer(t, nil)
	p.holdBuild(t)
	for _, tok := range []string{"", "wrong-token-0123456789"} {
		for _, proc := range procedures() {
			if got := callRaw(t, p.srv.URL, proc, bearer(tok)); got != connect.CodeUnauthenticated {
				t.Errorf("%s with token %q: %v, want unauthenticated", proc, tok, got)
			}
		}
		_, err := status(p.srv.URL, tok, build.ID)
		wantCode(t, "status with token "+tok, err, connect.CodeUnauthenticated)
		_, data, err := pull(p.srv.URL, bearer(tok), build.ID, nodepb.ArtifactKind_ARTIFACT_KIND_ROOTFS)
		wantCode(t, "rootfs with token "+tok, err, connect.CodeUnauthenticated)
		if len(data) != 0 {
			t.Errorf("rootfs with token %q: %d bytes served", tok, len(data))
		}
	}
	if d, data, err := pull(p.srv.URL, bearer(token), build.ID, nodepb.ArtifactKind_ARTIFACT_KIND_ROOTFS); err != nil || int64(len(data)) != d.GetSize() {
		t.Fatalf("rootfs with the token: %d bytes of %d, %v", len(data), d.GetSize(), err)
	}
}

// TestBuildIDTraversal: a build ID is an untrusted string; one that
// climbs out of the builds directory names no file.
func TestBuildIDTraversal(t *testing.T) {
	t.Parallel()
	p := newPeer(t, nil)
	p.holdBuild(t)
	// A file where "<builds>/../x/rootfs.tar" would be.
	outside := filepath.Join(filepath.Dir(p.local.Catalog.BuildsDir()), "x")
	must(t, os.MkdirAll(outside, 0o755))
	must(t, os.WriteFile(filepath.Join(outside, nodebuild.ArtifactName), []byte("secret"), 0o600))
	for _, id := range []string{"../x", "..", "a\\..\\x", "x\x00", "", "/etc"} {
		_, data, err := pull(p.srv.URL, bearer(token), id, nodepb.ArtifactKind_ARTIFACT_KIND_ROOTFS)
		if err == nil || bytes.Contains(data, []byte("secret")) {
			t.Errorf("rootfs of build %q: %v, %q; want a refusal", id, err, data)
		}
		wantCode(t, "rootfs of build "+id, err, connect.CodeInvalidArgument)
		_, err = status(p.srv.URL, token, id)
		wantCode(t, "status of build "+id, err, connect.CodeInvalidArgument)
	}
	puller := newPeer(t, func(context.Context, string) (*nodepb.BuildSource, error) {
		t.Error("a bad build ID reached the control plane")
		return nil, errdefs.ErrNotFound
	})
	for _, id := range []string{"../x", "..", "a/b"} {
		if _, err := puller.node.Resolve(context.Background(), "team-a", nodeapi.Template{ID: tmpl.ID, BuildID: id}); !errdefs.IsInvalid(err) {
			t.Errorf("Resolve of build %q: err = %v, want invalid", id, err)
		}
	}
}

// TestPullChecksTheArtifact: a stream that is not the recorded artifact
// (one byte changed, longer, shorter) is refused, and nothing of it is
// left on the node that pulled.
func TestPullChecksTheArtifact(t *testing.T) {
	t.Parallel()
	holder := newPeer(t, nil)
	holder.holdBuild(t)
	for name, corrupt := range map[string]func([]byte) []byte{
		"flipped":   func(b []byte) []byte { b[len(b)/2] ^= 1; return b },
		"longer":    func(b []byte) []byte { return append(b, make([]byte, 1<<20)...) },
		"truncated": func(b []byte) []byte { return b[:len(b)-512] },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			bad := tampering(t, holder.srv.URL, nodepb.ArtifactKind_ARTIFACT_KIND_ROOTFS, corrupt)
			puller := newPeer(t, sourceFrom(t, holder, bad.URL))
			_, err := puller.node.Resolve(context.Background(), "team-a", nodeapi.Template{ID: tmpl.ID, BuildID: build.ID})
			if !errdefs.IsUnavailable(err) || !strings.Contains(err.Error(), "sha256") {
				t.Fatalf("Resolve over a %s stream: err = %v, want unavailable naming the sha256", name, err)
			}
			left, _ := os.ReadDir(puller.local.Catalog.BuildDir(build.ID))
			if len(left) != 0 {
				t.Fatalf("a refused pull left %v", left)
			}
			if _, err := puller.local.Catalog.Build(context.Background(), build.ID); !errdefs.IsNotFound(err) {
				t.Fatalf("a refused pull recorded the build: %v", err)
			}
			if got := puller.counter(t, "node_template_pulls_total", "digest_mismatch"); got != 1 {
				t.Fatalf("node_template_pulls_total{result=digest_mismatch} = %v, want 1", got)
			}
		})
	}
}

// TestPullResolvesAndCoalesces: concurrent creates of a build a node
// lacks pull it once; the tree is the holder's, and the node then holds
// it (for placement) and can serve it on.
func TestPullResolvesAndCoalesces(t *testing.T) {
	t.Parallel()
	holder := newPeer(t, nil)
	holder.holdBuild(t)
	var locates atomic.Int64
	src := sourceFrom(t, holder, holder.srv.URL)
	puller := newPeer(t, func(ctx context.Context, id string) (*nodepb.BuildSource, error) {
		locates.Add(1)
		return src(ctx, id)
	})
	ctx := context.Background()
	const n = 6
	var wg sync.WaitGroup
	got := make([]nodeapi.Template, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			got[i], errs[i] = puller.node.Resolve(ctx, "team-a", nodeapi.Template{ID: tmpl.ID, BuildID: build.ID})
		})
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("Resolve %d: %v", i, errs[i])
		}
	}
	if h := holder.rootfsHits.Load(); h != 1 {
		t.Errorf("%d artifact streams for %d concurrent creates, want 1", h, n)
	}
	hb, _ := holder.local.Catalog.Build(ctx, build.ID)
	if got := puller.counter(t, "node_template_pulls_total", "pulled"); got != 1 {
		t.Errorf("node_template_pulls_total{result=pulled} = %v, want 1", got)
	}
	if got := puller.counter(t, "node_template_pull_bytes_total", ""); got != float64(hb.RootFSSize) {
		t.Errorf("node_template_pull_bytes_total = %v, want %d", got, hb.RootFSSize)
	}
	root := got[0].RootFS
	if !strings.HasPrefix(root, puller.local.Catalog.BuildsDir()) || got[0].BuildID != build.ID || got[0].User != "user" {
		t.Fatalf("resolved %+v, want the puller's own copy", got[0])
	}
	if b, err := os.ReadFile(filepath.Join(root, "hi")); err != nil || string(b) != "hi\n" {
		t.Fatalf("/hi = %q, %v", b, err)
	}
	if l, err := os.Readlink(filepath.Join(root, "hi-link")); err != nil || l != "/hi" {
		t.Fatalf("/hi-link -> %q, %v", l, err)
	}
	a, _ := os.Stat(filepath.Join(root, "hi"))
	b, _ := os.Stat(filepath.Join(root, "etc", "hi-hard"))
	if !os.SameFile(a, b) {
		t.Fatal("the hard link became a copy")
	}
	if fi, err := os.Stat(filepath.Join(root, "etc", "big")); err != nil || fi.Mode().Perm() != 0o600 || fi.Size() != 350000 {
		t.Fatalf("/etc/big: %v, %v", fi, err)
	}
	held, err := puller.local.Catalog.HeldBuilds(ctx)
	if err != nil || len(held) != 1 || held[0] != build.ID {
		t.Fatalf("HeldBuilds = %v, %v", held, err)
	}
	// The copy is no collector's candidate until the control plane lets
	// the build go (Sync).
	if plan, err := puller.local.Catalog.PlanGC(ctx); err != nil || len(plan.Candidates) != 0 {
		t.Fatalf("collector candidates after a pull: %+v, %v", plan, err)
	}
	// A second resolve uses the copy: no new pull.
	if _, err := puller.node.Resolve(ctx, "team-a", nodeapi.Template{ID: tmpl.ID, BuildID: build.ID}); err != nil || locates.Load() != 1 {
		t.Fatalf("second Resolve: %v, %d locates", err, locates.Load())
	}
	// The template collector frees the copy (no sandbox uses it): the
	// next create pulls it again.
	must(t, os.RemoveAll(puller.local.Catalog.BuildDir(build.ID)))
	if again, err := puller.node.Resolve(ctx, "team-a", nodeapi.Template{ID: tmpl.ID, BuildID: build.ID}); err != nil || again.RootFS != root {
		t.Fatalf("Resolve after the copy was collected: %+v, %v", again, err)
	}
	if h := holder.rootfsHits.Load(); h != 2 {
		t.Errorf("%d artifact streams after the copy was collected, want 2", h)
	}
	// The puller serves the same artifact on.
	st, err := status(puller.srv.URL, token, build.ID)
	if err != nil {
		t.Fatalf("status on the puller: %v", err)
	}
	if a := st.GetBuild().GetRootfs(); a.GetSha256() == "" || a.GetSha256() != hb.RootFSSHA256 || a.GetSize() != hb.RootFSSize {
		t.Fatalf("puller's artifact %s/%d, holder's %s/%d", a.GetSha256(), a.GetSize(), hb.RootFSSHA256, hb.RootFSSize)
	}
	d, data, err := pull(puller.srv.URL, bearer(token), build.ID, nodepb.ArtifactKind_ARTIFACT_KIND_ROOTFS)
	if err != nil || d.GetSha256() != hb.RootFSSHA256 || int64(len(data)) != hb.RootFSSize {
		t.Fatalf("the puller's artifact stream: %+v, %d bytes, %v", d, len(data), err)
	}
}

// TestPullKeepsTeams: a team that may not use a template does not start
// it through a node, whether the node holds the build or pulls it.
func TestPullKeepsTeams(t *testing.T) {
	t.Parallel()
	holder := newPeer(t, nil)
	holder.holdBuild(t)
	puller := newPeer(t, sourceFrom(t, holder, holder.srv.URL))
	ctx := context.Background()
	for _, p := range []*peer{puller, holder} {
		if _, err := p.node.Resolve(ctx, "team-b", nodeapi.Template{ID: tmpl.ID, BuildID: build.ID}); !errdefs.IsNotFound(err) {
			t.Fatalf("team-b resolved team-a's private build: err = %v, want not found", err)
		}
	}
	if _, err := puller.node.Resolve(ctx, "team-a", nodeapi.Template{ID: tmpl.ID, BuildID: build.ID}); err != nil {
		t.Fatalf("team-a: %v", err)
	}
}

// TestPullWithoutHolder: a node that cannot get a build says so.
// (Redirects are refused: a peer answers for itself.)
func TestPullWithoutHolder(t *testing.T) {
	t.Parallel()
	holder := newPeer(t, nil)
	holder.holdBuild(t)
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	// A holder that redirects is not followed, even to the real artifact.
	redirect := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, holder.srv.URL+r.URL.Path, http.StatusFound)
	}))
	t.Cleanup(redirect.Close)
	for name, p := range map[string]*peer{
		"no control plane":   newPeer(t, nil),
		"dead holder":        newPeer(t, sourceFrom(t, holder, dead.URL)),
		"redirecting holder": newPeer(t, sourceFrom(t, holder, redirect.URL)),
	} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		_, err := p.node.Resolve(ctx, "team-a", nodeapi.Template{ID: tmpl.ID, BuildID: build.ID})
		cancel()
		if !errdefs.IsUnavailable(err) || !strings.Contains(err.Error(), "lacks build "+build.ID) {
			t.Errorf("%s: err = %v, want unavailable saying the node lacks the build", name, err)
		}
	}
}
