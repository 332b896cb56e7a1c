package nodeinteg

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	nodepb "github.com/warren-sandbox/warren/api/node"
	"github.com/warren-sandbox/warren/internal/driver/runsc"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/node"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/nodeauth"
	"github.com/warren-sandbox/warren/internal/nodebuild"
	"github.com/warren-sandbox/warren/internal/nodebuild/nodebuildtest"
	"github.com/warren-sandbox/warren/internal/sandbox"
)

// travelAgent starts an agent on h whose template snapshots travel, tied
// to runtime.
func (h *host) travelAgent(runtime string) (*node.Agent, *runsc.Driver) {
	drv, err := runsc.New(runsc.Config{Path: h.runsc, StateDir: filepath.Join(h.dir, "runsc"), CgroupRoot: "/" + h.cgRoot, Logger: h.log()})
	if err != nil {
		h.t.Fatal(err)
	}
	return h.agentOn(drv, func(c *node.Config) { c.SnapshotRuntime = runtime }), drv
}

// savedLayers lists the saved layers on h.
func (h *host) savedLayers() []string {
	es, _ := os.ReadDir(filepath.Join(h.dir, "layers"))
	var out []string
	for _, e := range es {
		if strings.HasPrefix(e.Name(), "tpl-") {
			out = append(out, e.Name())
		}
	}
	return out
}

// copyFiles copies the regular files of src into a new directory dst (as
// a node that pulls a snapshot stages them).
func copyFiles(t *testing.T, src, dst string) {
	t.Helper()
	if err := os.MkdirAll(dst, 0o700); err != nil {
		t.Fatal(err)
	}
	es, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		in, err := os.Open(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out, err := os.Create(filepath.Join(dst, e.Name()))
		if err == nil {
			_, err = io.Copy(out, in)
			out.Close()
		}
		in.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestTemplateSnapshotTravels: a template snapshot taken on one node (its
// memory image, its layer's changes as layer.tar, the host it was taken
// with) restores on another whose runtime is the same, once imported
// there: the start command's process and files, /tmp (memory) and the
// layer (a file written, a lower file deleted), before the create began.
// A node with another runtime refuses the import and keeps nothing; the
// imported snapshot's deletion frees its saved layer.
func TestTemplateSnapshotTravels(t *testing.T) {
	builder := newHost(t)
	a1, _ := builder.travelAgent("runsc test build")
	defer a1.Close()
	ctx := context.Background()
	tmpl := builder.createReq("x").Template
	tmpl.Resources = sandbox.Resources{VCPUs: 1, MemoryMB: 512, DiskMB: 256}
	tmpl.StartCmd = "echo started > /home/user/started; sudo rm -f /etc/motd; echo mem > /tmp/mem; sleep infinity"
	dir := filepath.Join(builder.dir, "template-snapshot")
	if err := a1.Snapshot(ctx, tmpl, "test -s /tmp/mem", dir); err != nil {
		t.Fatal(err)
	}
	defer a1.DeleteSnapshot(context.Background(), dir)
	for _, f := range []string{nodeapi.SnapshotLayerTar, nodeapi.SnapshotMetaFile, "checkpoint.img"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Fatalf("the snapshot has no %s: %v", f, err)
		}
	}

	// Another runtime: refused, nothing kept.
	other := newHost(t)
	a3, _ := other.travelAgent("runsc another build")
	defer a3.Close()
	odir := filepath.Join(other.dir, "pulled-snapshot")
	copyFiles(t, dir, odir)
	if err := a3.ImportSnapshot(ctx, tmpl, odir); !errdefs.IsUnsupported(err) || !strings.Contains(err.Error(), "runtime") {
		t.Fatalf("import on another runtime: err = %v, want unsupported naming the runtime", err)
	}
	if left := other.savedLayers(); len(left) != 0 {
		t.Fatalf("a refused import left saved layers %v", left)
	}

	h := newHost(t)
	a2, drv2 := h.travelAgent("runsc test build")
	defer a2.Close()
	pdir := filepath.Join(h.dir, "pulled-snapshot")
	copyFiles(t, dir, pdir)
	if err := a2.ImportSnapshot(ctx, tmpl, pdir); err != nil {
		t.Fatal(err)
	}
	if left := h.savedLayers(); len(left) != 1 {
		t.Fatalf("saved layers after the import: %v, want one", left)
	}
	tmpl.SnapshotDir = pdir
	id := "tr" + sandbox.NewID()[:10]
	req := h.createReq(id)
	req.Template = tmpl
	sb, err := a2.Create(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	tok := "tok-" + id
	for cmd, want := range map[string]string{
		"cat /home/user/started": "started",
		"cat /tmp/mem":           "mem",
		"test -e /etc/motd && echo there || echo gone":         "gone",
		"pgrep -f 'sleep infinity' >/dev/null && echo running": "running",
	} {
		if out, _ := run(t, sb, tok, cmd); strings.TrimSpace(out) != want {
			t.Errorf("%s on the other node = %q, want %q", cmd, out, want)
		}
	}
	if err := a2.Kill(ctx, id, sandbox.KillRequest); err != nil {
		t.Fatal(err)
	}
	if left := h.leftovers(drv2, id); len(left) > 0 {
		t.Errorf("left after kill: %v", left)
	}
	if err := a2.DeleteSnapshot(ctx, pdir); err != nil {
		t.Fatal(err)
	}
	if left := h.savedLayers(); len(left) != 0 {
		t.Errorf("saved layers after the snapshot's deletion: %v", left)
	}
}

// TestSandboxSnapshotTravels: a snapshot of a running sandbox, kept as a
// build of its node's catalog with its artifacts (as `warren node` keeps
// it), restores on another node of the same runtime, which pulls the
// build over the first node's routes, checked: the sandbox's file and its
// /tmp (memory), with the source still running on the first. A node of
// another runtime refuses the build and keeps nothing of it.
func TestSandboxSnapshotTravels(t *testing.T) {
	// The first node's own token (as `warren node` has it): the control
	// plane's credential opens its routes, its pull key checks the grants
	// the control plane gives the others.
	const token = "wnt_00000000000000ab_travel"
	holderPull := nodeauth.Credential(token, nodeauth.PurposePull)
	ctx := context.Background()
	h1 := newHost(t)
	a1, _ := h1.travelAgent("runsc test build")
	defer a1.Close()
	ss1 := nodebuildtest.New(t, a1, a1, func(c *nodebuild.NodeConfig) {
		c.Credential, c.PullKey = nodeauth.Credential(token, nodeauth.PurposeRPC), holderPull
	})
	mux := http.NewServeMux()
	mux.Handle(ss1.Node.Handler())
	srv := httptest.NewServer(mux)
	defer srv.Close()
	id := "st" + sandbox.NewID()[:10]
	cr := h1.createReq(id)
	cr.TeamID = "team-a"
	sb, err := a1.Create(ctx, cr)
	if err != nil {
		t.Fatal(err)
	}
	tok := "tok-" + id
	run(t, sb, tok, "echo disk > /home/user/f; echo mem > /tmp/m")
	req := nodeapi.SnapshotRequest{TeamID: "team-a", TemplateID: "snaptravel0000000001", BuildID: "3f2e1d0c-9b8a-4765-8432-10fedcba9876"}
	start := time.Now()
	snap, err := ss1.SnapshotSandbox(ctx, id, req)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("snapshot of a running sandbox kept as a build with its artifacts: %s", time.Since(start))
	if !snap.Travels() {
		t.Fatalf("the snapshot does not travel: %+v", snap)
	}
	if out, _ := run(t, sb, tok, "cat /tmp/m"); strings.TrimSpace(out) != "mem" {
		t.Errorf("source after the snapshot: %q", out)
	}
	// The control plane's answer about the build: its record as the node
	// keeps it, held by the first node, with a grant to pull it from there.
	locate := func(ctx context.Context, buildID string) (*nodepb.BuildSource, error) {
		b, err := ss1.Node.Export(ctx, buildID)
		if err != nil {
			return nil, err
		}
		tm, err := ss1.Local.Catalog.Store().GetTemplate(ctx, b.TemplateID)
		if err != nil {
			return nil, err
		}
		src := nodebuild.SourceOf(tm, b, &nodepb.BuildHolder{Address: srv.URL, Grant: nodeauth.Grant(holderPull, buildID, "travel-peer", time.Now().Add(10*time.Minute))})
		src.Current = true
		return src, nil
	}
	pulls := func(c *nodebuild.NodeConfig) { c.Locate = locate }

	h2 := newHost(t)
	a2, drv2 := h2.travelAgent("runsc test build")
	defer a2.Close()
	ss2 := nodebuildtest.New(t, a2, a2, pulls)
	start = time.Now()
	tmpl, err := ss2.Resolve(ctx, "team-a", nodeapi.Template{ID: req.TemplateID, BuildID: req.BuildID})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("pull of the snapshot's build (root filesystem and snapshot): %s", time.Since(start))
	cid := "sc" + sandbox.NewID()[:10]
	cr = h2.createReq(cid)
	cr.TeamID, cr.Template, cr.Resources = "team-a", tmpl, sb.Resources
	c, err := a2.Create(ctx, cr)
	if err != nil {
		t.Fatal(err)
	}
	if out, _ := run(t, c, "tok-"+cid, "cat /home/user/f /tmp/m"); strings.Join(strings.Fields(out), " ") != "disk mem" {
		t.Errorf("sandbox from the snapshot on the other node: %q", out)
	}
	if err := a2.Kill(ctx, cid, sandbox.KillRequest); err != nil {
		t.Fatal(err)
	}
	if left := h2.leftovers(drv2, cid); len(left) > 0 {
		t.Errorf("left after kill: %v", left)
	}

	h3 := newHost(t)
	a3, _ := h3.travelAgent("runsc another build")
	defer a3.Close()
	ss3 := nodebuildtest.New(t, a3, a3, pulls)
	if _, err := ss3.Resolve(ctx, "team-a", nodeapi.Template{ID: req.TemplateID, BuildID: req.BuildID}); !errdefs.IsUnsupported(err) {
		t.Errorf("a node of another runtime: %v, want unsupported", err)
	}
	if _, err := ss3.Local.Catalog.Build(ctx, req.BuildID); !errdefs.IsNotFound(err) {
		t.Errorf("a node of another runtime recorded the build: %v", err)
	}
	if err := a1.Kill(ctx, id, sandbox.KillRequest); err != nil {
		t.Fatal(err)
	}
}
