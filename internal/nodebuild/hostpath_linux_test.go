package nodebuild_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	nodepb "github.com/warren-sandbox/warren/api/node"
	"github.com/warren-sandbox/warren/internal/nodebuild"
	"github.com/warren-sandbox/warren/internal/templates"
)

// pathKeys are the storage records' fields that name files on a machine
// (as protojson and JSON name them).
var pathKeys = []string{`"rootfsDir"`, `"rootfsTar"`, `"snapshotDir"`, `"rootfsTarFingerprint"`, `"nodeId"`}

// namesNoPath fails if m, in binary or JSON, names any of words.
func namesNoPath(t *testing.T, what string, m proto.Message, words ...string) {
	t.Helper()
	bin, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	js, err := protojson.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range append(pathKeys, words...) {
		if bytes.Contains(bin, []byte(w)) || bytes.Contains(js, []byte(w)) {
			t.Errorf("%s names %s: %s", what, w, js)
		}
	}
}

// TestBuildWireHasNoPathField: no message the build wire carries, at any
// depth, has a field that names a path or the control plane's
// bookkeeping: a path cannot cross it by construction.
func TestBuildWireHasNoPathField(t *testing.T) {
	t.Parallel()
	seen := map[protoreflect.FullName]bool{}
	var walk func(md protoreflect.MessageDescriptor)
	walk = func(md protoreflect.MessageDescriptor) {
		if seen[md.FullName()] {
			return
		}
		seen[md.FullName()] = true
		for i := range md.Fields().Len() {
			f := md.Fields().Get(i)
			name := string(f.Name())
			for _, bad := range []string{"dir", "path", "_tar", "_file", "node_id", "fingerprint"} {
				// workdir is a path inside the sandbox, not on a host.
				if strings.HasSuffix(name, bad) && name != "workdir" {
					t.Errorf("%s.%s names a path or the control plane's bookkeeping", md.FullName(), name)
				}
			}
			if m := f.Message(); m != nil {
				walk(m)
			}
		}
	}
	for _, svc := range []protoreflect.Name{"BuildService", "ControlPlaneService"} {
		sd := nodepb.File_build_proto.Services().ByName(svc)
		for i := range sd.Methods().Len() {
			walk(sd.Methods().Get(i).Input())
			walk(sd.Methods().Get(i).Output())
		}
	}
	if len(seen) < 10 {
		t.Fatalf("walked %d messages: the services were not found", len(seen))
	}
}

// TestBuildStatusNamesNoHostPath: a node's answer about a build names no
// file of the node (its build directories were in it).
func TestBuildStatusNamesNoHostPath(t *testing.T) {
	t.Parallel()
	p := newPeer(t, nil)
	p.holdBuild(t)
	st, err := status(p.srv.URL, token, build.ID)
	if err != nil {
		t.Fatal(err)
	}
	if st.GetBuild().GetRootfs().GetSha256() == "" {
		t.Fatalf("status %+v: no artifact", st)
	}
	namesNoPath(t, "the build's status", st, filepath.Dir(p.local.Catalog.BuildsDir()))
}

// TestStartBuildTakesNoHostPath: a start naming paths (the build's root
// filesystem, tar or snapshot as the host's, in fields the wire does not
// know, as an older peer's JSON had them) is refused, not mirrored,
// whether it comes in binary or in JSON.
func TestStartBuildTakesNoHostPath(t *testing.T) {
	t.Parallel()
	p := newPeer(t, nil)
	id := "5d6c3b8e-1f6a-4c2e-9d7b-2a1e5f4c3b2a"
	req := func() *nodepb.StartBuildRequest {
		return &nodepb.StartBuildRequest{Template: &nodepb.CatalogTemplate{Id: tmpl.ID, TeamId: "team-a"},
			Build: &nodepb.CatalogBuild{Id: id, TemplateId: tmpl.ID, Status: "waiting"}, Spec: &nodepb.BuildSpec{FromImage: "reg.example/x:1"}}
	}
	c := buildClient(p.srv.URL, bearer(token))
	// Unknown fields of the binary form: a build's (the rootfs dir of an
	// older peer), the template's, the spec's step's.
	withPath := func(m proto.Message) {
		b := protowire.AppendTag(nil, 99, protowire.BytesType)
		m.ProtoReflect().SetUnknown(protowire.AppendString(b, "/etc/shadow"))
	}
	for name, set := range map[string]func(*nodepb.StartBuildRequest){
		"build":    func(r *nodepb.StartBuildRequest) { withPath(r.Build) },
		"template": func(r *nodepb.StartBuildRequest) { withPath(r.Template) },
		"step": func(r *nodepb.StartBuildRequest) {
			r.Spec.Steps = []*nodepb.BuildStep{{Type: "RUN", Args: []string{"true"}}}
			withPath(r.Spec.Steps[0])
		},
		"request": func(r *nodepb.StartBuildRequest) { withPath(r) },
	} {
		r := req()
		set(r)
		_, err := c.StartBuild(context.Background(), connect.NewRequest(r))
		wantCode(t, "a start with an unknown field in its "+name, err, connect.CodeInvalidArgument)
	}
	for name, field := range map[string]string{
		"rootfs dir":   `"rootfsDir": "/"`,
		"rootfs tar":   `"rootfsTar": "/etc/shadow"`,
		"snapshot dir": `"snapshotDir": "/etc"`,
	} {
		body := `{"template": {"id": "tmplaaaaaaaaaaaaaaaa", "teamId": "team-a"},
			"build": {"id": "` + id + `", "templateId": "tmplaaaaaaaaaaaaaaaa", "status": "waiting", ` + field + `},
			"spec": {"fromImage": "reg.example/x:1"}}`
		hr, _ := http.NewRequest(http.MethodPost, p.srv.URL+"/warren.node.v1.BuildService/StartBuild", strings.NewReader(body))
		hr.Header.Set("Content-Type", "application/json")
		hr.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(hr)
		if err != nil {
			t.Fatal(err)
		}
		msg, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("a JSON start naming %s = %d %s, want 400", name, resp.StatusCode, msg)
		}
	}
	if _, err := p.local.Catalog.Build(context.Background(), id); err == nil {
		t.Error("a start naming host paths was mirrored")
	}
}

// TestLocateNamesNoHostPath: the control plane's answer to a node names
// no file, whatever its own record holds.
func TestLocateNamesNoHostPath(t *testing.T) {
	t.Parallel()
	r, cat, st, srv := newRemote(t)
	ctx := context.Background()
	_, b, err := r.CreateTemplate(ctx, templates.CreateRequest{TeamID: "team-a", Name: "mine"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cat.UpdateBuild(ctx, b.ID, func(b *templates.Build) error {
		b.NodeID, b.RootFSDir, b.SnapshotDir, b.RootFSTar = "n-1", "/srv/secret/rootfs", "/srv/secret/snap", "/srv/secret/rootfs.tar"
		b.RootFSSHA256, b.RootFSSize = strings.Repeat("a", 64), 1
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := cat.FinishBuild(ctx, b.ID, nil); err != nil {
		t.Fatal(err)
	}
	heartbeat(t, st, "n-1", "http://n-1")
	src, err := locateAt(srv.URL, token, b.ID)
	if err != nil || src.GetBuild().GetId() != b.ID {
		t.Fatalf("locate = %+v, %v", src, err)
	}
	namesNoPath(t, "the locate answer", src, "/srv/secret")
	// The records made of the answer hold no path either.
	if rec := nodebuild.BuildRecord(src.GetBuild()); rec.RootFSDir != "" || rec.RootFSTar != "" || rec.SnapshotDir != "" || rec.NodeID != "" {
		t.Errorf("the record made of the answer: %+v", rec)
	}
}
