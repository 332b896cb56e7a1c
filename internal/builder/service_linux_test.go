package builder

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/templates"
)

// gzTar is what the E2B SDK uploads for a COPY step: a gzip'd tar of the
// files, paths relative to the context.
func gzTar(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for name, body := range files {
		tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(body)), ModTime: time.Unix(1700000000, 0)})
		tw.Write([]byte(body))
	}
	tw.Close()
	zw.Close()
	return buf.Bytes()
}

func put(t *testing.T, url string, body []byte) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPut, url, bytes.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func TestServiceE2BFlow(t *testing.T) {
	needRoot(t)
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t, tinyRootFS(t))
	mux := http.NewServeMux()
	mux.Handle(UploadPathPrefix, f.svc.UploadHandler())
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	// 1. POST /v3/templates
	tpl, bd, err := f.svc.CreateTemplate(ctx, templates.CreateRequest{TeamID: "team", Name: "svc-app:v1"})
	if err != nil {
		t.Fatal(err)
	}
	// 2. GET /templates/{id}/files/{hash}, then PUT the gzip'd tar.
	const hash = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	present, path, err := f.svc.Files(ctx, "team", tpl.ID, hash)
	if err != nil || present || !strings.HasPrefix(path, UploadPathPrefix+tpl.ID+"/"+hash+"?token=") {
		t.Fatalf("Files = %v, %q, %v", present, path, err)
	}
	if _, _, err := f.svc.Files(ctx, "other-team", tpl.ID, hash); !errdefs.IsNotFound(err) {
		t.Fatalf("Files of another team's template: %v", err)
	}
	t.Run("upload refused", func(t *testing.T) {
		if code := put(t, srv.URL+strings.Replace(path, "token=", "token=00", 1), gzTar(t, nil)); code != http.StatusForbidden {
			t.Errorf("bad token: %d, want 403", code)
		}
		req, _ := http.NewRequest(http.MethodPut, srv.URL+path, strings.NewReader("plain text"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		msg, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		// The error's text (its class, the file's path) stays in the log.
		if resp.StatusCode != http.StatusBadRequest || string(msg) != "upload failed\n" {
			t.Errorf("not a tar: %d %q, want 400 \"upload failed\"", resp.StatusCode, msg)
		}
	})
	t.Run("plain tar", func(t *testing.T) {
		// A COPY with gzip: false uploads the tar as it is.
		const plainHash = "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210"
		_, plainPath, err := f.svc.Files(ctx, "team", tpl.ID, plainHash)
		if err != nil {
			t.Fatal(err)
		}
		zr, err := gzip.NewReader(bytes.NewReader(gzTar(t, map[string]string{"plain.txt": "plain\n"})))
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(zr)
		if code := put(t, srv.URL+plainPath, raw); code != http.StatusCreated {
			t.Fatalf("plain tar upload: %d, want 201", code)
		}
		stored, err := f.b.filesPath(tpl.ID, plainHash)
		if err != nil {
			t.Fatal(err)
		}
		sf, err := os.Open(stored)
		if err != nil {
			t.Fatal(err)
		}
		defer sf.Close()
		szr, err := gzip.NewReader(sf)
		if err != nil {
			t.Fatalf("stored upload is not gzip'd: %v", err)
		}
		if h, err := tar.NewReader(szr).Next(); err != nil || h.Name != "plain.txt" {
			t.Errorf("stored upload: %v, %v", h, err)
		}
	})
	if code := put(t, srv.URL+path, gzTar(t, map[string]string{"app/main.py": "print('hi')\n", "app/data.txt": "data\n"})); code != http.StatusCreated {
		t.Fatalf("upload: %d", code)
	}
	if present, _, err := f.svc.Files(ctx, "team", tpl.ID, hash); err != nil || !present {
		t.Fatalf("after upload: present %v, %v", present, err)
	}

	// 3. POST /v2/templates/{id}/builds/{buildID}
	spec := Spec{
		FromTemplate: "base",
		Steps: []Step{
			{Type: StepUser, Args: []string{"user"}}, // the tiny base lacks it; creates it
			{Type: StepCopy, Args: []string{"app", "/home/user/app", "user", ""}, FilesHash: hash},
			{Type: StepEnv, Args: []string{"APP_MODE", "test"}},
			{Type: StepRun, Args: []string{"cat /home/user/app/data.txt; echo mode=$APP_MODE"}},
		},
		StartCmd: "echo started > /tmp/s",
		ReadyCmd: "test -f /tmp/s",
	}
	t.Run("start refused", func(t *testing.T) {
		bad := spec
		bad.Steps = []Step{{Type: StepCopy, Args: []string{"x", "/x"}, FilesHash: strings.Repeat("f", 64)}}
		if _, err := f.svc.StartBuild(ctx, StartRequest{TeamID: "team", TemplateID: tpl.ID, BuildID: bd.ID, Spec: bad}); !errdefs.IsInvalid(err) {
			t.Errorf("missing upload: %v, want invalid", err)
		}
		if _, err := f.svc.StartBuild(ctx, StartRequest{TeamID: "other", TemplateID: tpl.ID, BuildID: bd.ID, Spec: spec}); !errdefs.IsNotFound(err) {
			t.Errorf("another team: %v, want not found", err)
		}
	})
	id, err := f.svc.StartBuild(ctx, StartRequest{TeamID: "team", TemplateID: tpl.ID, BuildID: bd.ID, Spec: spec})
	if err != nil || id != bd.ID {
		t.Fatalf("StartBuild = %q, %v", id, err)
	}
	if _, err := f.svc.StartBuild(ctx, StartRequest{TeamID: "team", TemplateID: tpl.ID, BuildID: bd.ID, Spec: spec}); !errdefs.IsConflict(err) {
		t.Errorf("second start: %v, want conflict", err)
	}

	// 4. Poll status with logsOffset until ready and no more entries.
	var all []templates.LogEntry
	waitCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	done, err := f.svc.Wait(waitCtx, bd.ID)
	if err != nil {
		t.Fatal(err)
	}
	for {
		st, err := f.svc.Status(ctx, "team", tpl.ID, bd.ID, len(all))
		if err != nil {
			t.Fatal(err)
		}
		if st.LogEntries == nil {
			t.Fatal("logEntries is nil")
		}
		if len(st.LogEntries) == 0 {
			if st.Status != templates.BuildReady {
				t.Fatalf("status %s, reason %+v", st.Status, st.Reason)
			}
			break
		}
		all = append(all, st.LogEntries...)
	}
	var text strings.Builder
	for _, e := range all {
		text.WriteString(e.Message + "\n")
	}
	for _, want := range []string{"data", "mode=test", "Ready command passed"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("logs lack %q:\n%s", want, text.String())
		}
	}
	t.Run("logs endpoint", func(t *testing.T) {
		errs, err := f.svc.Logs(ctx, "team", tpl.ID, bd.ID, LogsQuery{MinLevel: templates.LogWarn})
		if err != nil || len(errs) != 0 {
			t.Errorf("warn+ entries of a good build: %v, %v", errs, err)
		}
		last, err := f.svc.Logs(ctx, "team", tpl.ID, bd.ID, LogsQuery{Backward: true, Limit: 1})
		if err != nil || len(last) != 1 || !strings.HasPrefix(last[0].Message, "Build finished") {
			t.Errorf("newest entry: %v, %v", last, err)
		}
		from, err := f.svc.Logs(ctx, "team", tpl.ID, bd.ID, LogsQuery{Cursor: all[len(all)-1].Timestamp})
		if err != nil || len(from) == 0 || len(from) == len(all) && !all[0].Timestamp.Equal(all[len(all)-1].Timestamp) {
			t.Errorf("from cursor: %d entries of %d, %v", len(from), len(all), err)
		}
	})
	if got := readFile(t, done.RootFSDir, "home/user/app/main.py"); got != "print('hi')\n" {
		t.Errorf("COPY from upload: %q", got)
	}
	nt, err := f.cat.Resolve(ctx, "team", "svc-app:v1")
	if err != nil || nt.Env["APP_MODE"] != "test" || nt.StartCmd != spec.StartCmd {
		t.Errorf("Resolve = %+v, %v", nt, err)
	}
}

func TestServiceOneCallBuildAndRecover(t *testing.T) {
	needRoot(t)
	t.Parallel()
	ctx := context.Background()
	reg := newRegistry(t, "", "")
	ref := reg.push(t, "test/tiny:1", tinyRootFS(t), v1.Config{Env: []string{"PATH=/bin"}})
	f := newFixture(t, nil)
	reg.allowIn(f)
	df := "FROM " + ref + "\nENV PATH=/opt/bin:$PATH\nWORKDIR /work\nRUN echo \"$PATH\" > path.txt\nCMD [\"/bin/sh\", \"-c\", \"echo hi\"]\n"
	spec, _, err := ParseDockerfile(strings.NewReader(df), nil)
	if err != nil {
		t.Fatal(err)
	}
	id, err := f.svc.StartBuild(ctx, StartRequest{TeamID: "team", Create: templates.CreateRequest{Name: "from-dockerfile"}, Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	bd, err := f.svc.Wait(ctx, id)
	if err != nil || bd.Status != templates.BuildReady {
		t.Fatalf("build %+v, %v\n%s", bd, err, f.logs(t, id))
	}
	if got := readFile(t, bd.RootFSDir, "work/path.txt"); got != "/opt/bin:/bin\n" {
		t.Errorf("ENV expanded from the image's PATH at build time: %q", got)
	}
	if bd.StartCmd != "echo hi" || bd.Workdir != "/work" || bd.User != "user" {
		t.Errorf("build %+v", bd)
	}

	// A build left waiting by a previous process is failed by Recover.
	_, stale, err := f.cat.CreateBuild(ctx, templates.CreateRequest{TeamID: "team", Name: "stale"})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.svc.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := f.cat.Build(ctx, stale.ID)
	if err != nil || got.Status != templates.BuildError || !strings.Contains(got.Reason.Message, "restart") {
		t.Fatalf("stale build after Recover: %+v, %v", got, err)
	}
	if got, _ := f.cat.Build(ctx, id); got.Status != templates.BuildReady {
		t.Fatalf("Recover touched a finished build: %s", got.Status)
	}
}

// TestExpireWaiting: a build made by POST /v3/templates and never started
// is failed once it waited too long, and can no longer be started; a
// recent one is left alone.
func TestExpireWaiting(t *testing.T) {
	needRoot(t)
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t, tinyRootFS(t))
	_, old, err := f.svc.CreateTemplate(ctx, templates.CreateRequest{TeamID: "team", Name: "abandoned"})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := f.svc.ExpireWaiting(ctx, time.Now().Add(-time.Hour)); err != nil || n != 0 {
		t.Fatalf("expire of builds older than an hour: %d, %v; want none", n, err)
	}
	if n, err := f.svc.ExpireWaiting(ctx, time.Now().Add(time.Second)); err != nil || n != 1 {
		t.Fatalf("expire: %d, %v; want 1", n, err)
	}
	got, err := f.cat.Build(ctx, old.ID)
	if err != nil || got.Status != templates.BuildError || got.Reason == nil || !strings.Contains(got.Reason.Message, "never started") {
		t.Fatalf("expired build: %+v, %v", got, err)
	}
	if _, err := f.svc.StartBuild(ctx, StartRequest{TeamID: "team", TemplateID: old.TemplateID, BuildID: old.ID, Spec: Spec{FromTemplate: "base"}}); !errdefs.IsConflict(err) {
		t.Errorf("start of an expired build: %v, want conflict", err)
	}
	if n, err := f.svc.ExpireWaiting(ctx, time.Now().Add(time.Second)); err != nil || n != 0 {
		t.Errorf("second expiry: %d, %v; want none", n, err)
	}
}
