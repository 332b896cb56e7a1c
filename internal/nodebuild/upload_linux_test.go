package nodebuild_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/warren-sandbox/warren/internal/builder"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/errdefs/errhttp"
	"github.com/warren-sandbox/warren/internal/store"
	"github.com/warren-sandbox/warren/internal/templates"
)

func gzipTar(t *testing.T, name, content string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	must(t, tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(content)), Typeflag: tar.TypeReg}))
	tw.Write([]byte(content))
	must(t, tw.Close())
	must(t, zw.Close())
	return buf.Bytes()
}

func put(t *testing.T, url string, body []byte) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPut, url, bytes.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	return resp.StatusCode, b.String()
}

// TestUploadsGoToTheBuildNode: a COPY context uploaded through warren
// api lands on the node the template's waiting build is pinned to, where
// the build will run; the upload URL is signed, names nothing else, and
// is the template owner's only.
func TestUploadsGoToTheBuildNode(t *testing.T) {
	t.Parallel()
	r, cat, st, _ := newRemote(t)
	p := newPeer(t, nil)
	heartbeat(t, st, "n-1", p.srv.URL)
	api := httptest.NewServer(r.UploadHandler())
	t.Cleanup(api.Close)
	ctx := context.Background()
	tm, b, err := r.CreateTemplate(ctx, templates.CreateRequest{TeamID: "team-a", Name: "mine"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.Files(ctx, "team-b", tm.ID, "h1"); !errdefs.IsNotFound(err) && !errors.Is(err, errdefs.ErrForbidden) {
		t.Fatalf("another team's upload check: %v", err)
	}
	present, path, err := r.Files(ctx, "team-a", tm.ID, "h1")
	if err != nil || present || !strings.HasPrefix(path, builder.UploadPathPrefix+tm.ID+"/h1?token=") {
		t.Fatalf("Files = %v, %q, %v", present, path, err)
	}
	// A second node appears: the build stays pinned where its files go.
	heartbeat(t, st, "n-2", "http://127.0.0.1:1")
	if got, err := cat.Build(ctx, b.ID); err != nil || got.NodeID != "n-1" || got.Status != templates.BuildWaiting {
		t.Fatalf("build after the upload check = %+v, %v; want waiting, pinned to n-1", got, err)
	}
	body := gzipTar(t, "a.txt", "from the context\n")
	for _, bad := range []string{
		strings.Replace(path, "token=", "token=0", 1),
		strings.Replace(path, "/h1?", "/h2?", 1),
		strings.Replace(path, tm.ID, "..", 1),
	} {
		if code, msg := put(t, api.URL+bad, body); code != http.StatusForbidden {
			t.Errorf("PUT %s = %d %s, want 403", bad, code, msg)
		}
	}
	if code, msg := put(t, api.URL+path, body); code != http.StatusCreated {
		t.Fatalf("PUT the context = %d %s", code, msg)
	}
	stored, err := filepath.Glob(filepath.Join(filepath.Dir(p.local.Catalog.BuildsDir()), "..", "builder", "files", tm.ID, "h1.tar.gz"))
	if err != nil || len(stored) != 1 {
		t.Fatalf("the context on the node: %v, %v", stored, err)
	}
	if got, err := os.ReadFile(stored[0]); err != nil || !bytes.Equal(got, body) {
		t.Fatalf("stored context differs: %v", err)
	}
	if present, _, err := r.Files(ctx, "team-a", tm.ID, "h1"); err != nil || !present {
		t.Fatalf("Files after the upload = %v, %v; want present", present, err)
	}
	// A build whose node is down does not run elsewhere, where its files
	// are not.
	must(t, st.SetNodeAdminStatus(ctx, "n-1", store.NodeCordoned))
	_, err = r.StartBuild(ctx, builder.StartRequest{TeamID: "team-a", TemplateID: tm.ID, BuildID: b.ID,
		Spec: builder.Spec{Steps: []builder.Step{{Type: builder.StepCopy, Args: []string{"a.txt", "/a.txt"}, FilesHash: "h1"}}}})
	if !errdefs.IsUnavailable(err) || !strings.Contains(errhttp.Message(err), "n-1") {
		t.Fatalf("start with the files' node cordoned: %v (client sees %q)", err, errhttp.Message(err))
	}
	if got, _ := cat.Build(ctx, b.ID); got.Status != templates.BuildWaiting || got.NodeID != "n-1" {
		t.Fatalf("build after the refused start = %+v", got)
	}
	// The node refuses a COPY of files never uploaded: the client gets
	// the node's reason, not its address, and the build stays waiting.
	must(t, st.SetNodeAdminStatus(ctx, "n-1", ""))
	_, err = r.StartBuild(ctx, builder.StartRequest{TeamID: "team-a", TemplateID: tm.ID, BuildID: b.ID,
		Spec: builder.Spec{Steps: []builder.Step{{Type: builder.StepCopy, Args: []string{"b.txt", "/b.txt"}, FilesHash: "h9"}}}})
	if msg := errhttp.Message(err); !errdefs.IsInvalid(err) || !strings.Contains(msg, "h9 were not uploaded") || strings.Contains(msg, "http") {
		t.Fatalf("start with files never uploaded: %v (client sees %q)", err, msg)
	}
	if got, _ := cat.Build(ctx, b.ID); got.Status != templates.BuildWaiting || got.NodeID != "n-1" {
		t.Fatalf("build after the node's refusal = %+v", got)
	}
}
