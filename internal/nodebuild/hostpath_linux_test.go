package nodebuild_test

import (
	"bytes"
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/warren-sandbox/warren/internal/nodebuild"
	"github.com/warren-sandbox/warren/internal/templates"
)

func post(t *testing.T, url, tok, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	return resp.StatusCode, b.String()
}

// pathKeys are the storage records' fields that name files on a machine.
var pathKeys = []string{`"rootfsDir"`, `"rootfsTar"`, `"snapshotDir"`, `"rootfsTarFingerprint"`, `"nodeId"`}

// TestBuildStatusNamesNoHostPath: a node's answer about a build names no
// file of the node (its build directories were in it).
func TestBuildStatusNamesNoHostPath(t *testing.T) {
	t.Parallel()
	p := newPeer(t, nil)
	p.holdBuild(t)
	code, body := get(t, p.srv.URL+nodebuild.PathPrefix+"builds/"+build.ID, token)
	if code != http.StatusOK {
		t.Fatalf("status = %d %s", code, body)
	}
	dataDir := filepath.Dir(p.local.Catalog.BuildsDir())
	for _, k := range append(pathKeys, dataDir) {
		if bytes.Contains(body, []byte(k)) {
			t.Errorf("the build's status names %s: %s", k, body)
		}
	}
}

// TestStartBuildTakesNoHostPath: a start naming paths (the build's root
// filesystem, tar or snapshot as the host's) is refused, not mirrored.
func TestStartBuildTakesNoHostPath(t *testing.T) {
	t.Parallel()
	p := newPeer(t, nil)
	id := "5d6c3b8e-1f6a-4c2e-9d7b-2a1e5f4c3b2a"
	for name, field := range map[string]string{
		"rootfs dir":   `"rootfsDir": "/"`,
		"rootfs tar":   `"rootfsTar": "/etc/shadow"`,
		"snapshot dir": `"snapshotDir": "/etc"`,
	} {
		body := `{"template": {"id": "tmplaaaaaaaaaaaaaaaa", "teamId": "team-a"},
			"build": {"id": "` + id + `", "templateId": "tmplaaaaaaaaaaaaaaaa", "status": "waiting", ` + field + `},
			"spec": {"fromImage": "reg.example/x:1", "steps": []}}`
		code, msg := post(t, p.srv.URL+nodebuild.PathPrefix+"builds", token, body)
		if code != http.StatusBadRequest {
			t.Errorf("start naming %s = %d %s, want 400", name, code, msg)
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
	code, body := get(t, srv.URL+nodebuild.LocatePath+b.ID, token)
	if code != http.StatusOK {
		t.Fatalf("locate = %d %s", code, body)
	}
	for _, k := range append(pathKeys, "/srv/secret") {
		if bytes.Contains(body, []byte(k)) {
			t.Errorf("the locate answer names %s: %s", k, body)
		}
	}
}
