package nodebuild_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"connectrpc.com/connect"

	nodepb "github.com/warren-sandbox/warren/api/node"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/nodebuild"
	"github.com/warren-sandbox/warren/internal/templates"
)

// builderHost is the host the holder's snapshot was taken on.
var builderHost = nodeapi.SnapshotHost{Runtime: "runsc sha256:00ff platform systrap", Envd: "sha256:0e", CPUFlags: []string{"avx2", "fpu", "sse4_2"},
	VCPUs: 2, MemoryMB: 512, TmpMB: 256, DiskMB: 1024}

// agentSnaps is the node agent's part of a snapshot's travel as these
// tests see it: this node's host, and the files of each snapshot it was
// asked to import (which the node hands it only once checked).
type agentSnaps struct {
	host     nodeapi.SnapshotHost
	mu       sync.Mutex
	imported []map[string][]byte
}

func (a *agentSnaps) SnapshotHost(nodeapi.Template) (nodeapi.SnapshotHost, error) { return a.host, nil }

func (a *agentSnaps) ImportSnapshot(_ context.Context, t nodeapi.Template, dir string) error {
	if t.RootFS == "" {
		return errdefs.ErrInvalid
	}
	files := map[string][]byte{}
	es, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range es {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return err
		}
		files[e.Name()] = b
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.imported = append(a.imported, files)
	return nil
}

func (a *agentSnaps) imports() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.imported)
}

func withSnapshots(s nodebuild.Snapshots) func(*nodebuild.NodeConfig) {
	return func(c *nodebuild.NodeConfig) { c.Snapshots = s }
}

// entry is one entry of a test tar.
type entry struct {
	hdr  tar.Header
	body string
}

func tarOf(t *testing.T, es ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range es {
		h := e.hdr
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(e.body))
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		must(t, tw.WriteHeader(&h))
		if e.body != "" {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	must(t, tw.Close())
	return buf.Bytes()
}

func file(name, body string) entry {
	return entry{tar.Header{Typeflag: tar.TypeReg, Name: name}, body}
}

// goodLayer is what a start command leaves in a sandbox's layer: a
// directory, files, a hard link, a symbolic link out of the tree (taken
// as a link, never followed) and a whiteout.
func goodLayer(t *testing.T) []byte {
	return tarOf(t,
		entry{tar.Header{Typeflag: tar.TypeDir, Name: "home/", Mode: 0o755}, ""},
		entry{tar.Header{Typeflag: tar.TypeDir, Name: "home/user/", Mode: 0o755, Uid: 1000, Gid: 1000}, ""},
		file("home/user/started", "1700000000\n"),
		entry{tar.Header{Typeflag: tar.TypeLink, Name: "home/user/started2", Linkname: "home/user/started"}, ""},
		entry{tar.Header{Typeflag: tar.TypeSymlink, Name: "home/user/hosts", Linkname: "/etc/hosts"}, ""},
		file(".wh.hi", ""),
		entry{tar.Header{Typeflag: tar.TypeReg, Name: "home/user/cap", PAXRecords: map[string]string{"SCHILY.xattr.user.note": "x"}}, ""},
	)
}

// holdSnapshot gives p's build a snapshot on ready taken on host, whose
// layer is layerTar.
func (p *peer) holdSnapshot(t *testing.T, host *nodeapi.SnapshotHost, layerTar []byte) map[string][]byte {
	t.Helper()
	snap := filepath.Join(p.local.Catalog.BuildDir(build.ID), "snapshot")
	must(t, os.MkdirAll(snap, 0o700))
	meta, _ := json.Marshal(map[string]any{"version": 1, "initToken": "init-token", "layer": "builder-layer", "host": host})
	files := map[string][]byte{
		"checkpoint.img":         bytes.Repeat([]byte("memory "), 20000),
		nodeapi.SnapshotMetaFile: meta,
	}
	if layerTar != nil {
		files[nodeapi.SnapshotLayerTar] = layerTar
	}
	for name, b := range files {
		must(t, os.WriteFile(filepath.Join(snap, name), b, 0o600))
	}
	if _, err := p.local.Catalog.Store().UpdateBuild(context.Background(), build.ID, func(b *templates.Build) error {
		b.StartCmd, b.ReadyCmd, b.SnapshotDir = "sleep infinity", "true", snap
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return files
}

// coldOn checks that the puller resolved the build to start cold: its
// own root filesystem, the start command, no snapshot recorded or left,
// nothing handed to the agent.
func coldOn(t *testing.T, puller *peer, snaps *agentSnaps, got nodeapi.Template) {
	t.Helper()
	if got.SnapshotDir != "" || got.StartCmd != "sleep infinity" || !strings.HasPrefix(got.RootFS, puller.local.Catalog.BuildsDir()) {
		t.Fatalf("on the puller: %+v; want its own root filesystem, the start command and no snapshot", got)
	}
	b, err := puller.local.Catalog.Build(context.Background(), build.ID)
	if err != nil || b.SnapshotDir != "" {
		t.Fatalf("the puller's record: %+v, %v; want no snapshot", b, err)
	}
	dir := puller.local.Catalog.BuildDir(build.ID)
	for _, name := range []string{"snapshot", "snapshot.importing", nodebuild.SnapshotArtifactName} {
		if _, err := os.Stat(filepath.Join(dir, name)); !os.IsNotExist(err) {
			t.Fatalf("%s on the puller: %v", name, err)
		}
	}
	if snaps != nil && snaps.imports() != 0 {
		t.Fatalf("the agent was handed %d snapshots", snaps.imports())
	}
}

// TestPulledSnapshotRestores: a node that pulls a build whose builder's
// snapshot on ready can travel, on a host that matches it (every CPU flag
// the builder had, and one more), gets the snapshot too, once for
// concurrent creates, and hands the agent the builder's files, checked;
// its sandboxes of the build restore it. It serves the same artifact on.
func TestPulledSnapshotRestores(t *testing.T) {
	t.Parallel()
	holder := newPeer(t, nil)
	holder.holdBuild(t)
	files := holder.holdSnapshot(t, &builderHost, goodLayer(t))
	here := builderHost
	here.CPUFlags = []string{"avx2", "avx512f", "fpu", "sse4_2"}
	snaps := &agentSnaps{host: here}
	puller := newPeer(t, sourceFrom(t, holder, holder.srv.URL), withSnapshots(snaps))
	ctx := context.Background()

	const n = 4
	var wg sync.WaitGroup
	got := make([]nodeapi.Template, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			got[i], errs[i] = puller.node.Resolve(ctx, "team-a", nodeapi.Template{ID: tmpl.ID, BuildID: build.ID})
		})
	}
	wg.Wait()
	want := filepath.Join(puller.local.Catalog.BuildDir(build.ID), "snapshot")
	for i := range n {
		if errs[i] != nil || got[i].SnapshotDir != want {
			t.Fatalf("Resolve %d = %+v, %v; want the snapshot %s", i, got[i], errs[i], want)
		}
	}
	if h := holder.snapshotHits.Load(); h != 1 {
		t.Errorf("%d snapshot streams for %d concurrent creates, want 1", h, n)
	}
	if snaps.imports() != 1 {
		t.Fatalf("the agent imported %d snapshots, want 1", snaps.imports())
	}
	imp := snaps.imported[0]
	if !slices.Equal(slices.Sorted(maps.Keys(imp)), slices.Sorted(maps.Keys(files))) {
		t.Fatalf("imported files %v, the builder's %v", slices.Sorted(maps.Keys(imp)), slices.Sorted(maps.Keys(files)))
	}
	for name, b := range files {
		if !bytes.Equal(imp[name], b) {
			t.Errorf("imported %s differs from the builder's", name)
		}
	}
	if _, err := os.Stat(filepath.Join(want, nodeapi.SnapshotLayerTar)); !os.IsNotExist(err) {
		t.Errorf("the layer tar stayed beside the imported snapshot: %v", err)
	}
	if got := puller.counter(t, "node_template_snapshot_pulls_total", "restorable"); got != 1 {
		t.Errorf("node_template_snapshot_pulls_total{result=restorable} = %v, want 1", got)
	}
	// Another team does not start it, though the node holds it now.
	if _, err := puller.node.Resolve(ctx, "team-b", nodeapi.Template{ID: tmpl.ID, BuildID: build.ID}); !errdefs.IsNotFound(err) {
		t.Errorf("team-b's Resolve: err = %v, want not found", err)
	}
	// The puller serves the builder's artifact on, behind the token.
	hb, _ := holder.local.Catalog.Build(ctx, build.ID)
	d, body, err := pull(puller.srv.URL, bearer(token), build.ID, nodepb.ArtifactKind_ARTIFACT_KIND_SNAPSHOT)
	sum := sha256.Sum256(body)
	if err != nil || hex.EncodeToString(sum[:]) != hb.SnapshotSHA256 || int64(len(body)) != hb.SnapshotSize || d.GetSha256() != hb.SnapshotSHA256 {
		t.Fatalf("snapshot from the puller: %v, %d bytes; want the builder's %d bytes", err, len(body), hb.SnapshotSize)
	}
	for _, p := range []*peer{holder, puller} {
		for _, tok := range []string{"", "wrong-token-0123456789"} {
			_, _, err := pull(p.srv.URL, bearer(tok), build.ID, nodepb.ArtifactKind_ARTIFACT_KIND_SNAPSHOT)
			wantCode(t, "snapshot with token "+tok, err, connect.CodeUnauthenticated)
		}
	}
}

// TestPulledSnapshotStartsCold: a node whose host does not match what the
// builder's snapshot was taken with (a CPU flag missing, another runsc, a
// sandbox of another shape), or that restores no other node's snapshot,
// or a build whose snapshot was taken for its node alone: the node gets
// the root filesystem alone, asks for no snapshot, and starts the
// build's sandboxes cold, with the start command.
func TestPulledSnapshotStartsCold(t *testing.T) {
	t.Parallel()
	missingFlag, otherRuntime, otherShape := builderHost, builderHost, builderHost
	missingFlag.CPUFlags = []string{"fpu", "sse4_2"}
	otherRuntime.Runtime = "runsc sha256:0abc platform systrap"
	otherShape.MemoryMB, otherShape.TmpMB = 1024, 512
	for name, c := range map[string]struct {
		builder *nodeapi.SnapshotHost
		here    *nodeapi.SnapshotHost
		result  string
	}{
		"a CPU flag missing":  {&builderHost, &missingFlag, "incompatible"},
		"another runsc":       {&builderHost, &otherRuntime, "incompatible"},
		"another memory size": {&builderHost, &otherShape, "incompatible"},
		"no agent":            {&builderHost, nil, "incompatible"},
		"for its node alone":  {nil, &builderHost, "none"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			holder := newPeer(t, nil)
			holder.holdBuild(t)
			layer := goodLayer(t)
			if c.builder == nil {
				layer = nil
			}
			holder.holdSnapshot(t, c.builder, layer)
			var snaps *agentSnaps
			var opts []func(*nodebuild.NodeConfig)
			if c.here != nil {
				snaps = &agentSnaps{host: *c.here}
				opts = append(opts, withSnapshots(snaps))
			}
			puller := newPeer(t, sourceFrom(t, holder, holder.srv.URL), opts...)
			on, err := holder.node.Resolve(context.Background(), "team-a", nodeapi.Template{ID: tmpl.ID, BuildID: build.ID})
			if err != nil || on.SnapshotDir == "" {
				t.Fatalf("on the builder: %+v, %v; want its snapshot", on, err)
			}
			got, err := puller.node.Resolve(context.Background(), "team-a", nodeapi.Template{ID: tmpl.ID, BuildID: build.ID, SnapshotDir: on.SnapshotDir})
			if err != nil {
				t.Fatal(err)
			}
			coldOn(t, puller, snaps, got)
			if h := holder.snapshotHits.Load(); h != 0 {
				t.Errorf("%d snapshot streams, want none", h)
			}
			if got := puller.counter(t, "node_template_snapshot_pulls_total", c.result); got != 1 {
				t.Errorf("node_template_snapshot_pulls_total{result=%s} = %v, want 1", c.result, got)
			}
		})
	}
}

// TestPulledSnapshotRefused: a snapshot artifact that is not what its
// builder recorded (a stream changed, longer or shorter, a recorded
// digest that is not the stream's, a description whose host is not the
// recorded one, a redirect, even to the real artifact), or whose tar a node does not write (a link, a
// directory, a climbing name, no memory image) or whose layer does not
// stay inside a sandbox's tree (a climbing or absolute path, a path
// through a symbolic link, a hard link to a file it did not write, a
// device node, an overlay attribute) is refused before the agent sees
// it: the build's sandboxes start cold, nothing of it left.
func TestPulledSnapshotRefused(t *testing.T) {
	t.Parallel()
	claimed := builderHost
	claimed.CPUFlags = []string{"fpu"}
	type tamper struct {
		stream func([]byte) []byte                  // the stream served
		record func(*nodepb.CatalogBuild)           // the control plane's record
		layer  []byte                               // the builder's layer tar
		outer  func(files map[string][]byte) []byte // the artifact itself
		// redirect makes the holder answer the snapshot with a redirect
		// to itself (the real artifact).
		redirect bool
	}
	layer := func(es ...entry) []byte { return tarOf(t, es...) }
	outer := func(es ...entry) func(map[string][]byte) []byte {
		return func(files map[string][]byte) []byte {
			var all []entry
			for _, n := range slices.Sorted(maps.Keys(files)) {
				all = append(all, file(n, string(files[n])))
			}
			return tarOf(t, append(all, es...)...)
		}
	}
	cases := map[string]tamper{
		"flipped stream":   {stream: func(b []byte) []byte { b[len(b)/2] ^= 1; return b }},
		"longer stream":    {stream: func(b []byte) []byte { return append(b, make([]byte, 4096)...) }},
		"truncated stream": {stream: func(b []byte) []byte { return b[:len(b)-512] }},
		"wrong digest": {record: func(b *nodepb.CatalogBuild) {
			b.Snapshot.Sha256 = strings.Repeat("0", 64)
		}},
		"claimed host not the recorded": {record: func(b *nodepb.CatalogBuild) {
			b.SnapshotHost = &nodepb.SnapshotHost{Runtime: claimed.Runtime, Envd: claimed.Envd, CpuFlags: claimed.CPUFlags,
				Vcpus: int32(claimed.VCPUs), MemoryMb: claimed.MemoryMB, TmpMb: claimed.TmpMB, DiskMb: claimed.DiskMB}
		}},
		"climbing layer path": {layer: layer(file("../../etc/cron.d/x", "* * * * * root sh"))},
		"absolute layer path": {layer: layer(file("/etc/cron.d/x", "x"))},
		"layer through a symlink": {layer: layer(entry{tar.Header{Typeflag: tar.TypeSymlink, Name: "a", Linkname: "/etc"}, ""},
			file("a/passwd", "root::0:0::/:/bin/sh\n"))},
		"layer hard link outside":  {layer: layer(entry{tar.Header{Typeflag: tar.TypeLink, Name: "shadow", Linkname: "../../../etc/shadow"}, ""})},
		"layer hard link to lower": {layer: layer(entry{tar.Header{Typeflag: tar.TypeLink, Name: "p", Linkname: "etc/passwd"}, ""})},
		"layer device node":        {layer: layer(entry{tar.Header{Typeflag: tar.TypeChar, Name: "dev/mem", Devmajor: 1, Devminor: 1}, ""})},
		"layer fifo":               {layer: layer(entry{tar.Header{Typeflag: tar.TypeFifo, Name: "f"}, ""})},
		"layer overlay attribute": {layer: layer(entry{tar.Header{Typeflag: tar.TypeDir, Name: "etc/", Mode: 0o755,
			PAXRecords: map[string]string{"SCHILY.xattr.trusted.overlay.opaque": "y"}}, ""})},
		"artifact with a symlink":   {outer: outer(entry{tar.Header{Typeflag: tar.TypeSymlink, Name: "pages.img", Linkname: "/etc/shadow"}, ""})},
		"artifact with a directory": {outer: outer(entry{tar.Header{Typeflag: tar.TypeDir, Name: "sub/", Mode: 0o755}, ""})},
		"artifact climbing name":    {outer: outer(file("../../x", "x"))},
		"artifact without an image": {outer: func(files map[string][]byte) []byte {
			delete(files, "checkpoint.img")
			return outer()(files)
		}},
		"redirect to the artifact": {redirect: true},
		"artifact with a device":   {outer: outer(entry{tar.Header{Typeflag: tar.TypeBlock, Name: "disk", Devmajor: 8}, ""})},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			holder := newPeer(t, nil)
			holder.holdBuild(t)
			lt := goodLayer(t)
			if c.layer != nil {
				lt = c.layer
			}
			files := holder.holdSnapshot(t, &builderHost, lt)
			ctx := context.Background()
			if c.outer != nil {
				// The holder serves a tar of its own making, recorded.
				if _, err := holder.node.Export(ctx, build.ID); err != nil {
					t.Fatal(err)
				}
				art := c.outer(files)
				must(t, os.WriteFile(filepath.Join(holder.local.Catalog.BuildDir(build.ID), nodebuild.SnapshotArtifactName), art, 0o600))
				sum := sha256.Sum256(art)
				if _, err := holder.local.Catalog.Store().UpdateBuild(ctx, build.ID, func(b *templates.Build) error {
					b.SnapshotSHA256, b.SnapshotSize = hex.EncodeToString(sum[:]), int64(len(art))
					return nil
				}); err != nil {
					t.Fatal(err)
				}
			}
			addr := holder.srv.URL
			if c.redirect {
				redir := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if artifactKind(r) == nodepb.ArtifactKind_ARTIFACT_KIND_SNAPSHOT {
						http.Redirect(w, r, holder.srv.URL+r.URL.Path, http.StatusFound)
						return
					}
					holder.srv.Config.Handler.ServeHTTP(w, r)
				}))
				t.Cleanup(redir.Close)
				addr = redir.URL
			}
			if c.stream != nil {
				addr = tampering(t, holder.srv.URL, nodepb.ArtifactKind_ARTIFACT_KIND_SNAPSHOT, c.stream).URL
			}
			src := sourceFrom(t, holder, addr)
			snaps := &agentSnaps{host: builderHost}
			puller := newPeer(t, func(ctx context.Context, id string) (*nodepb.BuildSource, error) {
				s, err := src(ctx, id)
				if err == nil && c.record != nil {
					c.record(s.Build)
				}
				return s, err
			}, withSnapshots(snaps))
			got, err := puller.node.Resolve(ctx, "team-a", nodeapi.Template{ID: tmpl.ID, BuildID: build.ID})
			if err != nil {
				t.Fatalf("Resolve: %v; want a cold start", err)
			}
			coldOn(t, puller, snaps, got)
			if got := puller.counter(t, "node_template_snapshot_pulls_total", "refused"); got != 1 {
				t.Errorf("node_template_snapshot_pulls_total{result=refused} = %v, want 1", got)
			}
		})
	}
}

// TestSnapshotDigestInEveryStatus: the statuses the control plane reads
// of a ready build each name its snapshot's artifact, also those asked
// while it is being written (the control plane records the first ready
// status it reads).
func TestSnapshotDigestInEveryStatus(t *testing.T) {
	t.Parallel()
	holder := newPeer(t, nil)
	holder.holdBuild(t)
	ctx := context.Background()
	if _, err := holder.node.Export(ctx, build.ID); err != nil { // the root filesystem's first
		t.Fatal(err)
	}
	holder.holdSnapshot(t, &builderHost, goodLayer(t))
	const n = 8
	var wg sync.WaitGroup
	sts := make([]*templates.Build, n)
	for i := range n {
		wg.Go(func() {
			st, err := status(holder.srv.URL, token, build.ID)
			if err != nil {
				t.Errorf("status %d: %v", i, err)
				return
			}
			sts[i] = nodebuild.BuildRecord(st.GetBuild())
		})
	}
	wg.Wait()
	for i, b := range sts {
		if b == nil {
			continue
		}
		if b.SnapshotSHA256 == "" || b.SnapshotSize == 0 || b.SnapshotHost == nil || !b.SnapshotHost.Equal(builderHost) {
			t.Errorf("status %d: snapshot %q, %d, %+v; want its artifact and host", i, b.SnapshotSHA256, b.SnapshotSize, b.SnapshotHost)
		}
	}
}
