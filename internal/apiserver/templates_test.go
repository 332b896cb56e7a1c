package apiserver_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/apiserver"
	"github.com/warren-sandbox/warren/internal/builder"
	"github.com/warren-sandbox/warren/internal/lifecycle"
	"github.com/warren-sandbox/warren/internal/lifecycle/fakenode"
	"github.com/warren-sandbox/warren/internal/nodebuild"
	"github.com/warren-sandbox/warren/internal/store"
	"github.com/warren-sandbox/warren/internal/store/storetest"
	"github.com/warren-sandbox/warren/internal/testenv"
	"github.com/warren-sandbox/warren/pkg/client"
)

// fakeRunner is a build Runner whose commands all succeed without running.
type fakeRunner struct{}

func (fakeRunner) Start(context.Context, builder.SandboxRequest) (builder.BuildSandbox, error) {
	return fakeBuildSandbox{}, nil
}

type fakeBuildSandbox struct{}

func (fakeBuildSandbox) Exec(context.Context, builder.Process) (int, error) { return 0, nil }
func (fakeBuildSandbox) Spawn(context.Context, builder.Process) error       { return nil }
func (fakeBuildSandbox) Stop(context.Context) error                         { return nil }

// tarOf returns a tar (gzip'd when gz) of files name → content.
func tarOf(t *testing.T, gz bool, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	var tw *tar.Writer
	var zw *gzip.Writer
	if gz {
		zw = gzip.NewWriter(&buf)
		tw = tar.NewWriter(zw)
	} else {
		tw = tar.NewWriter(&buf)
	}
	for name, body := range files {
		if strings.HasSuffix(name, "/") {
			tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeDir, Mode: 0o755, ModTime: time.Unix(1700000000, 0)})
			continue
		}
		tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(body)), ModTime: time.Unix(1700000000, 0)})
		tw.Write([]byte(body))
	}
	tw.Close()
	if zw != nil {
		zw.Close()
	}
	return buf.Bytes()
}

// tplEnv is an API server with the template API over a real catalog and
// build service (builds run with fakeRunner).
type tplEnv struct {
	*env
	api     *apiserver.Server
	local   *builder.Local
	snaps   *fakeSnapshotter
	lossy   *lossySnapshots
	recNode *recNode
}

func newTemplateEnv(t *testing.T, opts ...func(*apiserver.Config)) *tplEnv {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	baseTar := filepath.Join(dir, "base.tar")
	if err := os.WriteFile(baseTar, tarOf(t, false, map[string]string{
		"etc/": "", "etc/passwd": "root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000::/home/user:/bin/sh\n",
		"etc/group": "root:x:0:\nuser:x:1000:\n", "home/": "", "home/user/": "", "tmp/": "",
	}), 0o644); err != nil {
		t.Fatal(err)
	}
	local, err := builder.OpenLocal(builder.LocalConfig{DataDir: filepath.Join(dir, "data"), BaseRootFSTar: baseTar, Runner: fakeRunner{}, NoNetwork: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(local.Service.Close)
	if err := local.Catalog.EnsureBase(ctx, nil); err != nil {
		t.Fatal(err)
	}
	st := storetest.SQLite(t)
	n := fakenode.New()
	rn := &recNode{Node: n}
	// The node side of snapshots as `warren serve` has it: the agent's
	// snapshots kept in the one catalog.
	snaps := &fakeSnapshotter{node: n}
	ss, err := nodebuild.NewSandboxSnapshots(nodebuild.SandboxSnapshotsConfig{Agent: snaps, Catalog: local.Catalog})
	if err != nil {
		t.Fatal(err)
	}
	lossy := &lossySnapshots{SandboxSnapshotter: ss}
	lc, err := lifecycle.New(lifecycle.Config{Store: st, Node: rn, Snapshots: lossy})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { lc.Run(runCtx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	e := &env{t: t, st: st, node: n, lc: lc}
	for _, tm := range []*store.Team{
		{ID: "t1", Name: "one", Limits: store.Limits{MaxConcurrent: 20, MaxTimeout: time.Hour, MaxVCPUs: 4, MaxMemoryMB: 4096}},
		{ID: "t2", Name: "two"},
	} {
		if err := st.CreateTeam(ctx, tm); err != nil {
			t.Fatal(err)
		}
	}
	for tid, dst := range map[string]*string{"t1": &e.key1, "t2": &e.key2} {
		k, _, err := apiserver.AddKey(ctx, st, tid, "test", "")
		if err != nil {
			t.Fatal(err)
		}
		*dst = k
	}
	cfg := apiserver.Config{
		Store: st, Lifecycle: lc, Templates: local.Catalog, AdminToken: adminToken,
		Builds: local.Service, Catalog: local.Catalog,
	}
	for _, o := range opts {
		o(&cfg)
	}
	api, err := apiserver.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(builder.UploadPathPrefix, local.Service.UploadHandler())
	mux.Handle("/", api)
	e.srv = httptest.NewServer(conformTo(t, mux))
	t.Cleanup(e.srv.Close)
	return &tplEnv{env: e, api: api, local: local, snaps: snaps, lossy: lossy, recNode: rn}
}

// decodeJSON decodes r's body into v, failing the test on error.
func decodeJSON(t testing.TB, r result, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("decode %s: %v", r.body, err)
	}
}

// expect checks r's status and, for errors, the E2B error body.
func expect(t testing.TB, what string, r result, status int) {
	t.Helper()
	if r.status != status {
		t.Fatalf("%s: status %d, want %d: %s", what, r.status, status, r.body)
	}
	if status >= 400 {
		var e struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		}
		if err := json.Unmarshal(r.body, &e); err != nil || e.Code != status || e.Message == "" {
			t.Fatalf("%s: error body %s: want {code:%d, message}", what, r.body, status)
		}
	}
}

type createResp struct {
	TemplateID string   `json:"templateID"`
	BuildID    string   `json:"buildID"`
	Tags       []string `json:"tags"`
	Names      []string `json:"names"`
	Aliases    []string `json:"aliases"`
	Public     bool     `json:"public"`
}

func (e *tplEnv) createTemplate(key, body string) createResp {
	e.t.Helper()
	r := e.do("POST", "/v3/templates", key, body)
	expect(e.t, "create template", r, http.StatusAccepted)
	var c createResp
	decodeJSON(e.t, r, &c)
	return c
}

type buildInfo struct {
	TemplateID string `json:"templateID"`
	BuildID    string `json:"buildID"`
	Status     string `json:"status"`
	LogEntries []struct {
		Level   string `json:"level"`
		Message string `json:"message"`
		Step    string `json:"step"`
	} `json:"logEntries"`
	Logs   []string `json:"logs"`
	Reason *struct {
		Message string `json:"message"`
		Step    string `json:"step"`
	} `json:"reason"`
}

// waitBuild polls the status endpoint as the SDK does until the build ends
// and returns the last status with every log entry collected.
func (e *tplEnv) waitBuild(key, tid, bid string) buildInfo {
	e.t.Helper()
	var all buildInfo
	offset := 0
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		r := e.do("GET", "/templates/"+tid+"/builds/"+bid+"/status?logsOffset="+itoa(offset), key, "")
		expect(e.t, "build status", r, http.StatusOK)
		if !bytes.Contains(r.body, []byte(`"logEntries":[`)) {
			e.t.Fatalf("logEntries is not an array: %s", r.body)
		}
		var bi buildInfo
		decodeJSON(e.t, r, &bi)
		offset += len(bi.LogEntries)
		all.LogEntries = append(all.LogEntries, bi.LogEntries...)
		all.TemplateID, all.BuildID, all.Status, all.Reason = bi.TemplateID, bi.BuildID, bi.Status, bi.Reason
		if (bi.Status == "ready" || bi.Status == "error") && len(bi.LogEntries) == 0 {
			return all
		}
		if _, err := e.local.Service.Wait(contextWithTimeout(e.t, 200*time.Millisecond), bid); err != nil && !isTimeout(err) {
			e.t.Fatal(err)
		}
	}
	e.t.Fatalf("build %s did not finish", bid)
	return all
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

func contextWithTimeout(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func isTimeout(err error) bool { return err == context.DeadlineExceeded }

func TestTemplateCreate(t *testing.T) {
	e := newTemplateEnv(t)
	c := e.createTemplate(e.key1, `{"name":"my-tpl:v1","tags":["extra"],"cpuCount":2,"memoryMB":1024,"unknown":true}`)
	if c.TemplateID == "" || c.BuildID == "" || strings.Join(c.Tags, ",") != "v1,extra" || strings.Join(c.Names, ",") != "my-tpl" || c.Public {
		t.Fatalf("create: %+v", c)
	}
	// The same name again: a new build of the same template.
	c2 := e.createTemplate(e.key1, `{"alias":"my-tpl"}`)
	if c2.TemplateID != c.TemplateID || c2.BuildID == c.BuildID {
		t.Fatalf("second create: %+v, first %+v", c2, c)
	}
	// Another team takes the same name: its own template, no 409, and
	// neither team's name reaches the other's template.
	other := e.createTemplate(e.key2, `{"name":"my-tpl"}`)
	if other.TemplateID == c.TemplateID {
		t.Fatalf("team 2's my-tpl is team 1's template %s", c.TemplateID)
	}
	for key, want := range map[string]string{e.key1: c.TemplateID, e.key2: other.TemplateID} {
		r := e.do("GET", "/templates/aliases/my-tpl", key, "")
		if r.status != 200 || !strings.Contains(string(r.body), `"templateID":"`+want+`"`) {
			t.Fatalf("alias my-tpl: %d %s, want template %s", r.status, r.body, want)
		}
	}
	// With its own namespace a team names its own template.
	if c3 := e.createTemplate(e.key1, `{"name":"t1/my-tpl:v3"}`); c3.TemplateID != c.TemplateID {
		t.Fatalf("t1/my-tpl made %s, want %s", c3.TemplateID, c.TemplateID)
	}
	tests := []struct {
		name, key, body string
		status          int
		msg             string
	}{
		{"no key", "", `{"name":"x"}`, 401, ""},
		{"no body", e.key1, ``, 400, "required"},
		{"no name", e.key1, `{}`, 400, "'name'"},
		{"bad name", e.key1, `{"name":"Bad Name"}`, 400, "lowercase"},
		{"cpu too low", e.key1, `{"name":"x","cpuCount":0}`, 400, "CPU count must be at least 1"},
		{"cpu above limit", e.key1, `{"name":"x","cpuCount":5}`, 400, "CPU count can't be higher than 4"},
		{"memory too low", e.key1, `{"name":"x","memoryMB":64}`, 400, "Memory must be at least 128 MiB"},
		{"memory odd", e.key1, `{"name":"x","memoryMB":129}`, 400, "Memory must be divisible by 2"},
		{"memory above limit", e.key1, `{"name":"x","memoryMB":8192}`, 400, "Memory can't be higher than 4096 MiB"},
		{"wrong type", e.key1, `{"name":"x","cpuCount":"two"}`, 400, "cpuCount"},
		{"reserved name", e.key1, `{"name":"base"}`, 403, "reserved"},
		{"reserved name with a tag", e.key1, `{"name":"mcp-gateway:v1"}`, 403, "reserved"},
		{"namespace of another team", e.key1, `{"name":"t2/x"}`, 400, "namespace"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := e.do("POST", "/v3/templates", tc.key, tc.body)
			expect(t, tc.name, r, tc.status)
			if !strings.Contains(string(r.body), tc.msg) {
				t.Fatalf("message %s does not contain %q", r.body, tc.msg)
			}
		})
	}
}

// TestTemplateCreateMinFreeDisk: minFreeDiskMb (CLI --min-free-disk-mb)
// raises the template's and the build's disk size, never lowers it, and
// must be a non-negative integer.
func TestTemplateCreateMinFreeDisk(t *testing.T) {
	e := newTemplateEnv(t)
	tests := []struct {
		name, field string
		status      int
		disk        int64
	}{
		{"omitted", ``, 202, 4096},
		{"zero", `,"minFreeDiskMb":0`, 202, 4096},
		{"below the default", `,"minFreeDiskMb":100`, 202, 4096},
		{"above the default", `,"minFreeDiskMb":8192`, 202, 8192},
		{"negative", `,"minFreeDiskMb":-1`, 400, 0},
		{"above the server's bound", `,"minFreeDiskMb":65537`, 400, 0},
		{"not an integer", `,"minFreeDiskMb":1.5`, 400, 0},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := e.do("POST", "/v3/templates", e.key1, `{"name":"disk-`+itoa(i)+`"`+tc.field+`}`)
			expect(t, tc.name, r, tc.status)
			if tc.status != 202 {
				if !strings.Contains(string(r.body), "minFreeDiskMb") {
					t.Fatalf("message %s does not name minFreeDiskMb", r.body)
				}
				return
			}
			var c createResp
			decodeJSON(t, r, &c)
			g := e.do("GET", "/templates/"+c.TemplateID, e.key1, "")
			expect(t, "get template", g, 200)
			var got struct {
				Builds []struct {
					BuildID    string `json:"buildID"`
					DiskSizeMB int64  `json:"diskSizeMB"`
				} `json:"builds"`
			}
			decodeJSON(t, g, &got)
			if len(got.Builds) != 1 || got.Builds[0].BuildID != c.BuildID || got.Builds[0].DiskSizeMB != tc.disk {
				t.Fatalf("builds %+v, want one of disk %d", got.Builds, tc.disk)
			}
		})
	}
}

func TestTemplateFilesAndUpload(t *testing.T) {
	e := newTemplateEnv(t)
	c := e.createTemplate(e.key1, `{"name":"files"}`)
	hash := strings.Repeat("ab", 32)
	r := e.do("GET", "/templates/"+c.TemplateID+"/files/"+hash, e.key1, "")
	expect(t, "files", r, http.StatusCreated)
	var f struct {
		Present bool   `json:"present"`
		URL     string `json:"url"`
	}
	decodeJSON(t, r, &f)
	if f.Present || !strings.HasPrefix(f.URL, e.srv.URL+builder.UploadPathPrefix) {
		t.Fatalf("files: %+v (server %s)", f, e.srv.URL)
	}
	put := func(url string, body []byte) int {
		req, _ := http.NewRequest("PUT", url, bytes.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if st := put(f.URL+"x", tarOf(t, true, map[string]string{"a.txt": "a"})); st != http.StatusForbidden {
		t.Fatalf("upload with a bad token: %d", st)
	}
	if st := put(f.URL, []byte("not gzip")); st != http.StatusBadRequest {
		t.Fatalf("upload of a plain body: %d", st)
	}
	if st := put(f.URL, tarOf(t, true, map[string]string{"a.txt": "a"})); st/100 != 2 {
		t.Fatalf("upload: %d", st)
	}
	r = e.do("GET", "/templates/"+c.TemplateID+"/files/"+hash, e.key1, "")
	expect(t, "files after upload", r, http.StatusCreated)
	f.Present, f.URL = false, ""
	decodeJSON(t, r, &f)
	if !f.Present || f.URL != "" {
		t.Fatalf("files after upload: %s", r.body)
	}
	t.Run("errors", func(t *testing.T) {
		for _, tc := range []struct {
			name, path, key string
			status          int
		}{
			{"unknown template", "/templates/nope/files/" + hash, e.key1, 404},
			{"another team's template", "/templates/" + c.TemplateID + "/files/" + hash, e.key2, 404},
			{"bad hash", "/templates/" + c.TemplateID + "/files/a.b", e.key1, 400},
			{"no key", "/templates/" + c.TemplateID + "/files/" + hash, "", 401},
		} {
			t.Run(tc.name, func(t *testing.T) { expect(t, tc.name, e.do("GET", tc.path, tc.key, ""), tc.status) })
		}
	})
}

func TestTemplateUploadURL(t *testing.T) {
	hash := strings.Repeat("12", 32)
	for _, tc := range []struct {
		name, public, proto, want string
	}{
		{"from the request", "", "", "http://HOST" + builder.UploadPathPrefix},
		{"behind a TLS proxy", "", "https", "https://HOST" + builder.UploadPathPrefix},
		{"configured", "https://warren.example.com/", "", "https://warren.example.com" + builder.UploadPathPrefix},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newTemplateEnv(t, func(c *apiserver.Config) { c.PublicURL = tc.public })
			c := e.createTemplate(e.key1, `{"name":"up"}`)
			var hdr []string
			if tc.proto != "" {
				hdr = []string{"X-Forwarded-Proto", tc.proto}
			}
			r := e.do("GET", "/templates/"+c.TemplateID+"/files/"+hash, e.key1, "", hdr...)
			expect(t, "files", r, http.StatusCreated)
			var f struct {
				URL string `json:"url"`
			}
			decodeJSON(t, r, &f)
			want := strings.Replace(tc.want, "HOST", strings.TrimPrefix(e.srv.URL, "http://"), 1) + c.TemplateID + "/" + hash + "?token="
			if !strings.HasPrefix(f.URL, want) {
				t.Fatalf("url %q, want prefix %q", f.URL, want)
			}
		})
	}
}

func TestTemplateBuildFlow(t *testing.T) {
	needRootForBuild(t)
	e := newTemplateEnv(t)
	c := e.createTemplate(e.key1, `{"name":"flow"}`)
	hash := strings.Repeat("cd", 32)
	r := e.do("GET", "/templates/"+c.TemplateID+"/files/"+hash, e.key1, "")
	var f struct {
		URL string `json:"url"`
	}
	decodeJSON(t, r, &f)
	req, _ := http.NewRequest("PUT", f.URL, bytes.NewReader(tarOf(t, true, map[string]string{"app/": "", "app/hello.txt": "hello"})))
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode/100 != 2 {
		t.Fatalf("upload: %v %v", resp, err)
	}
	resp.Body.Close()
	body := `{"fromTemplate":"base","force":false,"startCmd":"sleep infinity","readyCmd":"true","steps":[
		{"type":"ENV","args":["GREETING","hi"],"force":false},
		{"type":"COPY","args":["app","/srv/app","",""],"force":false,"filesHash":"` + hash + `"},
		{"type":"WORKDIR","args":["/srv"]}]}`
	r = e.do("POST", "/v2/templates/"+c.TemplateID+"/builds/"+c.BuildID, e.key1, body)
	expect(t, "start build", r, http.StatusAccepted)
	if r.header.Get("Content-Length") != "0" {
		t.Fatalf("start build: Content-Length %q, want 0 (the SDK parses other empty 2xx bodies)", r.header.Get("Content-Length"))
	}
	bi := e.waitBuild(e.key1, c.TemplateID, c.BuildID)
	if bi.Status != "ready" || len(bi.LogEntries) == 0 {
		t.Fatalf("build: %+v", bi)
	}
	// Starting it again: conflict.
	expect(t, "start again", e.do("POST", "/v2/templates/"+c.TemplateID+"/builds/"+c.BuildID, e.key1, body), http.StatusConflict)

	// The catalog resolves the template with the build's environment.
	nt, err := e.local.Catalog.Resolve(context.Background(), "t1", "flow")
	if err != nil {
		t.Fatal(err)
	}
	if nt.Env["GREETING"] != "hi" || nt.Workdir != "/srv" || nt.StartCmd != "sleep infinity" {
		t.Fatalf("resolved template: %+v", nt)
	}
	if b, err := os.ReadFile(filepath.Join(nt.RootFS, "srv/app/hello.txt")); err != nil || string(b) != "hello" {
		t.Fatalf("copied file: %q %v", b, err)
	}

	// Logs endpoint: forward, backward, level filter, limit.
	var logs struct {
		Logs []struct {
			Level   string `json:"level"`
			Message string `json:"message"`
		} `json:"logs"`
	}
	r = e.do("GET", "/templates/"+c.TemplateID+"/builds/"+c.BuildID+"/logs?limit=2&direction=backward", e.key1, "")
	expect(t, "logs", r, http.StatusOK)
	decodeJSON(t, r, &logs)
	if len(logs.Logs) != 2 || !strings.Contains(logs.Logs[0].Message, "Build finished") {
		t.Fatalf("logs backward: %s", r.body)
	}
	r = e.do("GET", "/templates/"+c.TemplateID+"/builds/"+c.BuildID+"/logs?level=error", e.key1, "")
	expect(t, "logs level", r, http.StatusOK)
	decodeJSON(t, r, &logs)
	if len(logs.Logs) != 0 {
		t.Fatalf("error logs of a good build: %s", r.body)
	}

	// A sandbox from it.
	sb := e.create(e.key1, client.NewSandbox{TemplateID: "flow"})
	if sb.TemplateID != c.TemplateID || sb.Alias != "flow" {
		t.Fatalf("sandbox: %+v", sb)
	}
}

// TestTemplateBuildCLIRequest replays the requests of `e2b template create`
// (CLI 2.19.0) for a Dockerfile with ENV, ARG, WORKDIR, COPY --chown and
// RUN: the CLI's framing USER/WORKDIR steps, step fields Warren does not
// use (forceUpload, resolveSymlinks, gzip) and minFreeDiskMb are accepted
// and the build is what the Dockerfile says.
func TestTemplateBuildCLIRequest(t *testing.T) {
	needRootForBuild(t)
	e := newTemplateEnv(t)
	c := e.createTemplate(e.key1, `{"name":"from-cli","cpuCount":2,"memoryMB":1024,"minFreeDiskMb":100}`)
	hash := strings.Repeat("ef", 32)
	r := e.do("GET", "/templates/"+c.TemplateID+"/files/"+hash, e.key1, "")
	expect(t, "files", r, http.StatusCreated)
	var f struct {
		Present bool   `json:"present"`
		URL     string `json:"url"`
	}
	decodeJSON(t, r, &f)
	if f.Present || f.URL == "" {
		t.Fatalf("files: %s", r.body)
	}
	req, _ := http.NewRequest("PUT", f.URL, bytes.NewReader(tarOf(t, true, map[string]string{"note.txt": "note"})))
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode/100 != 2 {
		t.Fatalf("upload: %v %v", resp, err)
	}
	resp.Body.Close()
	body := `{"startCmd":"/opt/start.sh","readyCmd":"test -f /tmp/started","steps":[
		{"type":"USER","args":["root"],"force":false},
		{"type":"WORKDIR","args":["/"],"force":false},
		{"type":"ENV","args":["GREETING","hello-cli","SECOND","two"],"force":false},
		{"type":"ENV","args":["BUILD_ONLY","arg-value"],"force":false},
		{"type":"WORKDIR","args":["/opt/app"],"force":false},
		{"type":"COPY","args":["note.txt","/opt/","user:user",""],"force":false,"forceUpload":true,"resolveSymlinks":false,"gzip":true,"filesHash":"` + hash + `"},
		{"type":"RUN","args":["echo built > /opt/run.txt"],"force":false},
		{"type":"USER","args":["user"],"force":false}],
		"force":false,"fromImage":"e2bdev/base","somethingNewer":{"x":1}}`
	expect(t, "start build", e.do("POST", "/v2/templates/"+c.TemplateID+"/builds/"+c.BuildID, e.key1, body), http.StatusAccepted)
	if bi := e.waitBuild(e.key1, c.TemplateID, c.BuildID); bi.Status != "ready" {
		t.Fatalf("build: %+v", bi)
	}
	nt, err := e.local.Catalog.Resolve(context.Background(), "t1", "from-cli")
	if err != nil {
		t.Fatal(err)
	}
	if nt.Env["GREETING"] != "hello-cli" || nt.Env["SECOND"] != "two" || nt.Env["BUILD_ONLY"] != "arg-value" ||
		nt.Workdir != "/opt/app" || nt.User != "user" || nt.StartCmd != "/opt/start.sh" {
		t.Fatalf("resolved template: %+v", nt)
	}
	p := filepath.Join(nt.RootFS, "opt/note.txt")
	var st syscall.Stat_t
	if b, err := os.ReadFile(p); err != nil || string(b) != "note" || syscall.Stat(p, &st) != nil || st.Uid != 1000 {
		t.Fatalf("copied file: %q %v, uid %d", b, err, st.Uid)
	}
}

func TestTemplateBuildErrors(t *testing.T) {
	e := newTemplateEnv(t)
	c := e.createTemplate(e.key1, `{"name":"errs"}`)
	path := "/v2/templates/" + c.TemplateID + "/builds/" + c.BuildID
	for _, tc := range []struct {
		name, path, key, body string
		status                int
		msg                   string
	}{
		{"unknown step", path, e.key1, `{"steps":[{"type":"HEALTHCHECK","args":["x"]}]}`, 400, "unsupported step type"},
		{"bad args", path, e.key1, `{"steps":[{"type":"ENV","args":["ONLYKEY"]}]}`, 400, "wrong arguments"},
		{"missing upload", path, e.key1, `{"steps":[{"type":"COPY","args":["a","/a"],"filesHash":"` + strings.Repeat("ef", 32) + `"}]}`, 400, "not uploaded"},
		{"both bases", path, e.key1, `{"fromImage":"x","fromTemplate":"base"}`, 400, "not both"},
		{"aws registry without keys", path, e.key1, `{"fromImage":"x","fromImageRegistry":{"type":"aws"}}`, 400, "awsAccessKeyId"},
		{"unknown registry type", path, e.key1, `{"fromImage":"x","fromImageRegistry":{"type":"azure"}}`, 400, "not supported"},
		{"no body", path, e.key1, ``, 400, "required"},
		{"unknown build", "/v2/templates/" + c.TemplateID + "/builds/nope", e.key1, `{}`, 404, "not found"},
		{"unknown template", "/v2/templates/nope/builds/" + c.BuildID, e.key1, `{}`, 404, "not found"},
		{"another team", path, e.key2, `{}`, 404, "not found"},
		{"no key", path, "", `{}`, 401, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.do("POST", tc.path, tc.key, tc.body)
			expect(t, tc.name, r, tc.status)
			if !strings.Contains(string(r.body), tc.msg) {
				t.Fatalf("message %s does not contain %q", r.body, tc.msg)
			}
		})
	}

	// A build that fails (an image no registry serves): error with a
	// reason, its log entries delivered once, then none.
	expect(t, "start", e.do("POST", path, e.key1, `{"fromImage":"127.0.0.1:1/nothing:latest","steps":[]}`), http.StatusAccepted)
	bi := e.waitBuild(e.key1, c.TemplateID, c.BuildID)
	if bi.Status != "error" || bi.Reason == nil || bi.Reason.Message == "" || len(bi.LogEntries) == 0 {
		t.Fatalf("failed build: %+v", bi)
	}
	r := e.do("GET", "/templates/"+c.TemplateID+"/builds/"+c.BuildID+"/status?logsOffset=100000", e.key1, "")
	expect(t, "status past the end", r, http.StatusOK)
	if !bytes.Contains(r.body, []byte(`"logEntries":[]`)) {
		t.Fatalf("status past the end: %s", r.body)
	}
	for _, tc := range []struct {
		name, path, key string
		status          int
	}{
		{"status: bad offset", "/templates/" + c.TemplateID + "/builds/" + c.BuildID + "/status?logsOffset=-1", e.key1, 400},
		{"status: bad level", "/templates/" + c.TemplateID + "/builds/" + c.BuildID + "/status?level=loud", e.key1, 400},
		{"status: unknown build", "/templates/" + c.TemplateID + "/builds/nope/status", e.key1, 404},
		{"status: another team", "/templates/" + c.TemplateID + "/builds/" + c.BuildID + "/status", e.key2, 404},
		{"logs: bad cursor", "/templates/" + c.TemplateID + "/builds/" + c.BuildID + "/logs?cursor=x", e.key1, 400},
		{"logs: bad limit", "/templates/" + c.TemplateID + "/builds/" + c.BuildID + "/logs?limit=101", e.key1, 400},
		{"logs: bad direction", "/templates/" + c.TemplateID + "/builds/" + c.BuildID + "/logs?direction=up", e.key1, 400},
		{"logs: unknown build", "/templates/" + c.TemplateID + "/builds/nope/logs", e.key1, 404},
		{"logs: no key", "/templates/" + c.TemplateID + "/builds/" + c.BuildID + "/logs", "", 401},
	} {
		t.Run(tc.name, func(t *testing.T) { expect(t, tc.name, e.do("GET", tc.path, tc.key, ""), tc.status) })
	}
	r = e.do("GET", "/templates/"+c.TemplateID+"/builds/"+c.BuildID+"/logs?level=error", e.key1, "")
	expect(t, "error logs", r, http.StatusOK)
	if !strings.Contains(string(r.body), "Build failed") {
		t.Fatalf("error logs: %s", r.body)
	}
}

func TestTemplateListGetDeleteTagsPublic(t *testing.T) {
	e := newTemplateEnv(t)
	ctx := context.Background()
	// Two ready builds of team t1's template "lst" (finished through the
	// catalog: this test is about the API, not the build engine).
	c := e.createTemplate(e.key1, `{"name":"lst"}`)
	if _, err := e.local.Catalog.FinishBuild(ctx, c.BuildID, nil); err != nil {
		t.Fatal(err)
	}
	c2 := e.createTemplate(e.key1, `{"name":"lst:v2"}`)
	if _, err := e.local.Catalog.FinishBuild(ctx, c2.BuildID, nil); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		e.createTemplate(e.key1, `{"name":"more-`+itoa(i)+`"}`)
	}
	e.createTemplate(e.key2, `{"name":"other"}`)

	var list []struct {
		TemplateID  string   `json:"templateID"`
		BuildID     string   `json:"buildID"`
		Aliases     []string `json:"aliases"`
		Names       []string `json:"names"`
		BuildCount  int      `json:"buildCount"`
		BuildStatus string   `json:"buildStatus"`
		EnvdVersion string   `json:"envdVersion"`
		CreatedBy   any      `json:"createdBy"`
	}
	r := e.do("GET", "/templates", e.key1, "")
	expect(t, "list", r, http.StatusOK)
	decodeJSON(t, r, &list)
	if len(list) != 4 || list[0].TemplateID != c.TemplateID || list[0].BuildID != c.BuildID || list[0].BuildCount != 2 ||
		list[0].BuildStatus != "ready" || list[0].Names[0] != "lst" || list[0].EnvdVersion == "" {
		t.Fatalf("list: %s", r.body)
	}
	if strings.Contains(string(r.body), "other") {
		t.Fatalf("list shows another team's template: %s", r.body)
	}
	// v2 with pagination.
	r = e.do("GET", "/v2/templates?limit=3", e.key1, "")
	expect(t, "list v2", r, http.StatusOK)
	decodeJSON(t, r, &list)
	next := r.header.Get("X-Next-Token")
	if len(list) != 3 || next == "" {
		t.Fatalf("list v2 page 1: %d items, token %q", len(list), next)
	}
	r = e.do("GET", "/v2/templates?limit=3&nextToken="+next, e.key1, "")
	expect(t, "list v2 page 2", r, http.StatusOK)
	decodeJSON(t, r, &list)
	if len(list) != 1 || r.header.Get("X-Next-Token") != "" {
		t.Fatalf("list v2 page 2: %s (token %q)", r.body, r.header.Get("X-Next-Token"))
	}
	expect(t, "list v2 bad token", e.do("GET", "/v2/templates?nextToken=zz", e.key1, ""), 400)
	expect(t, "list v2 bad limit", e.do("GET", "/v2/templates?limit=0", e.key1, ""), 400)
	expect(t, "list no key", e.do("GET", "/templates", "", ""), 401)

	// Get with builds, newest first.
	var got struct {
		TemplateID string `json:"templateID"`
		Builds     []struct {
			BuildID string `json:"buildID"`
			Status  string `json:"status"`
		} `json:"builds"`
	}
	r = e.do("GET", "/templates/lst", e.key1, "")
	expect(t, "get", r, http.StatusOK)
	decodeJSON(t, r, &got)
	if got.TemplateID != c.TemplateID || len(got.Builds) != 2 || got.Builds[0].BuildID != c2.BuildID {
		t.Fatalf("get: %s", r.body)
	}
	expect(t, "get unknown", e.do("GET", "/templates/nope", e.key1, ""), 404)
	expect(t, "get another team's", e.do("GET", "/templates/"+c.TemplateID, e.key2, ""), 404)

	// Aliases: 200, 404, and 404 for another team's private template
	// (its existence does not leak).
	r = e.do("GET", "/templates/aliases/lst", e.key1, "")
	expect(t, "alias", r, http.StatusOK)
	if !strings.Contains(string(r.body), `"templateID":"`+c.TemplateID+`"`) || !strings.Contains(string(r.body), `"public":false`) {
		t.Fatalf("alias: %s", r.body)
	}
	expect(t, "alias unknown", e.do("GET", "/templates/aliases/nope", e.key1, ""), 404)
	expect(t, "alias of another team", e.do("GET", "/templates/aliases/lst", e.key2, ""), 404)
	expect(t, "alias of another team with its namespace", e.do("GET", "/templates/aliases/t1%2Flst", e.key2, ""), 404)
	expect(t, "alias of base", e.do("GET", "/templates/aliases/base", e.key2, ""), 200)

	// Tags.
	type tagJSON struct {
		Tag     string `json:"tag"`
		BuildID string `json:"buildID"`
	}
	var tags []tagJSON
	r = e.do("GET", "/templates/"+c.TemplateID+"/tags", e.key1, "")
	expect(t, "tags", r, http.StatusOK)
	decodeJSON(t, r, &tags)
	if len(tags) != 2 || tags[0].Tag != "default" || tags[0].BuildID != c.BuildID || tags[1].Tag != "v2" {
		t.Fatalf("tags: %s", r.body)
	}
	r = e.do("POST", "/templates/tags", e.key1, `{"target":"lst:v2","tags":["prod","stable"]}`)
	expect(t, "assign tags", r, http.StatusCreated)
	if !strings.Contains(string(r.body), `"buildID":"`+c2.BuildID+`"`) || !strings.Contains(string(r.body), `"tags":["prod","stable"]`) {
		t.Fatalf("assign tags: %s", r.body)
	}
	if _, b, err := e.local.Catalog.Lookup(ctx, "t1", "lst:prod"); err != nil || b.ID != c2.BuildID {
		t.Fatalf("lookup lst:prod: %v %v", b, err)
	}
	for _, tc := range []struct {
		name, method, body, key string
		status                  int
	}{
		{"assign: no target", "POST", `{"tags":["x"]}`, e.key1, 400},
		{"assign: no tags", "POST", `{"target":"lst"}`, e.key1, 400},
		{"assign: unknown tag", "POST", `{"target":"lst:nope","tags":["x"]}`, e.key1, 404},
		{"assign: unknown template", "POST", `{"target":"nope","tags":["x"]}`, e.key1, 404},
		{"assign: another team", "POST", `{"target":"lst","tags":["x"]}`, e.key2, 404},
		{"delete: no name", "DELETE", `{"tags":["x"]}`, e.key1, 400},
		{"delete: no tags", "DELETE", `{"name":"lst"}`, e.key1, 400},
		{"delete: unknown tag", "DELETE", `{"name":"lst","tags":["nope"]}`, e.key1, 404},
		{"delete: another team", "DELETE", `{"name":"lst","tags":["prod"]}`, e.key2, 404},
		{"delete", "DELETE", `{"name":"lst","tags":["prod"]}`, e.key1, 204},
	} {
		t.Run(tc.name, func(t *testing.T) { expect(t, tc.name, e.do(tc.method, "/templates/tags", tc.key, tc.body), tc.status) })
	}
	if _, _, err := e.local.Catalog.Lookup(ctx, "t1", "lst:prod"); err == nil {
		t.Fatal("deleted tag still resolves")
	}
	expect(t, "tags unknown", e.do("GET", "/templates/nope/tags", e.key1, ""), 404)
	expect(t, "unknown subpath", e.do("GET", "/templates/lst/whatever", e.key1, ""), 404)

	// Public: another team may then use it (resolve team/name, create),
	// not inspect or change it.
	r = e.do("PATCH", "/v2/templates/lst", e.key1, `{"public":true}`)
	expect(t, "patch", r, http.StatusOK)
	if string(r.body) != `{"names":["lst"]}` {
		t.Fatalf("patch: %s", r.body)
	}
	expect(t, "public alias, bare name", e.do("GET", "/templates/aliases/lst", e.key2, ""), 404)
	expect(t, "public alias as team/name", e.do("GET", "/templates/aliases/t1%2Flst", e.key2, ""), 200)
	expect(t, "get now public, bare name", e.do("GET", "/templates/lst", e.key2, ""), 404)
	expect(t, "get now public by ID", e.do("GET", "/templates/"+c.TemplateID, e.key2, ""), 404)
	expect(t, "tags of now public", e.do("GET", "/templates/"+c.TemplateID+"/tags", e.key2, ""), 404)
	expect(t, "status of now public", e.do("GET", "/templates/"+c.TemplateID+"/builds/"+c.BuildID+"/status", e.key2, ""), 404)
	expect(t, "patch by another team, bare name", e.do("PATCH", "/v2/templates/lst", e.key2, `{"public":false}`), 404)
	expect(t, "patch by another team", e.do("PATCH", "/v2/templates/t1%2Flst", e.key2, `{"public":false}`), 404)
	expect(t, "patch v1", e.do("PATCH", "/templates/lst", e.key1, `{"public":false}`), 200)
	expect(t, "patch unknown", e.do("PATCH", "/v2/templates/nope", e.key1, `{"public":true}`), 404)
	expect(t, "patch bad body", e.do("PATCH", "/v2/templates/lst", e.key1, `{"public":"yes"}`), 400)

	// Delete: 404 for others, 403 for base, 204, then 404.
	expect(t, "delete another team's", e.do("DELETE", "/templates/"+c.TemplateID, e.key2, ""), 404)
	expect(t, "delete base", e.do("DELETE", "/templates/base", e.key1, ""), 403)
	expect(t, "delete", e.do("DELETE", "/templates/lst", e.key1, ""), 204)
	expect(t, "delete again", e.do("DELETE", "/templates/"+c.TemplateID, e.key1, ""), 404)
	expect(t, "get deleted", e.do("GET", "/templates/"+c.TemplateID, e.key1, ""), 404)
}

// needRootForBuild skips (or fails under CI=true) a test whose build
// mounts overlays.
func needRootForBuild(t *testing.T) {
	t.Helper()
	testenv.NeedRoot(t, "template builds (overlay mounts)")
}

func TestTemplatesUnconfigured(t *testing.T) {
	e := newEnv(t)
	expect(t, "no template API", e.do("POST", "/v3/templates", e.key1, `{"name":"x"}`), 404)
}

// TestSystemTemplates: the operator (admin token, no team) builds system
// templates, reserved names included; every team resolves them by name
// unless it has its own template of that name.
func TestSystemTemplates(t *testing.T) {
	e := newTemplateEnv(t)
	admin := []string{"X-Admin-Token", adminToken}
	build := func(key string, hdr []string, name string) string {
		t.Helper()
		r := e.do("POST", "/v3/templates", key, `{"name":"`+name+`"}`, hdr...)
		expect(t, "create "+name, r, http.StatusAccepted)
		var c createResp
		decodeJSON(t, r, &c)
		expect(t, "build "+name, e.do("POST", "/v2/templates/"+c.TemplateID+"/builds/"+c.BuildID, key,
			`{"fromTemplate":"base","steps":[{"type":"RUN","args":["true"]}]}`, hdr...), http.StatusAccepted)
		if _, err := e.local.Service.Wait(contextWithTimeout(t, time.Minute), c.BuildID); err != nil {
			t.Fatal(err)
		}
		return c.TemplateID
	}
	sys := build("", admin, "shared-tool")
	reserved := build("", admin, "code-interpreter-v1")
	createdFrom := func(key, name string) string {
		t.Helper()
		r := e.do("POST", "/v2/sandboxes", key, `{"templateID":"`+name+`"}`)
		expect(t, "create from "+name, r, http.StatusCreated)
		var sb client.Sandbox
		decodeJSON(t, r, &sb)
		return sb.TemplateID
	}
	for _, key := range []string{e.key1, e.key2} {
		if got := createdFrom(key, "shared-tool"); got != sys {
			t.Fatalf("shared-tool = %s, want the system template %s", got, sys)
		}
		if got := createdFrom(key, "code-interpreter-v1"); got != reserved {
			t.Fatalf("code-interpreter-v1 = %s, want %s", got, reserved)
		}
	}
	own := build(e.key1, nil, "shared-tool")
	if got := createdFrom(e.key1, "shared-tool"); got != own {
		t.Fatalf("team 1's shared-tool = %s, want its own %s", got, own)
	}
	if got := createdFrom(e.key2, "shared-tool"); got != sys {
		t.Fatalf("team 2's shared-tool = %s, want the system one", got)
	}
	expect(t, "team deletes a system template", e.do("DELETE", "/templates/"+sys, e.key2, ""), http.StatusForbidden)
	expect(t, "team publishes a system template", e.do("PATCH", "/v2/templates/"+sys, e.key2, `{"public":true}`), http.StatusForbidden)
	// Usable, not inspectable: the operator's builds are the operator's.
	expect(t, "team reads a system template", e.do("GET", "/templates/"+sys, e.key2, ""), http.StatusForbidden)
	expect(t, "team reads a system template's tags", e.do("GET", "/templates/"+sys+"/tags", e.key2, ""), http.StatusForbidden)
	expect(t, "operator reads its template", e.do("GET", "/templates/"+sys, "", "", admin...), http.StatusOK)
}
