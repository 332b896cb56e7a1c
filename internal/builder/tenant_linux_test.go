package builder

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/templates"
)

// The attacks in this file are what a tenant (a team with an ordinary API
// key) can send through the template build API: an uploaded context, the
// steps, and the hash naming the upload.

// entry is one tar entry of a crafted upload.
type entry struct {
	name, body, link string
	typ              byte
	mode             int64
}

func craftTar(t testing.TB, entries []entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Linkname: e.link, Mode: e.mode, ModTime: time.Unix(1700000000, 0)}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if e.typ == tar.TypeReg {
			h.Size = int64(len(e.body))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if e.typ == tar.TypeReg {
			tw.Write([]byte(e.body))
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func gzipped(b []byte) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(b)
	zw.Close()
	return buf.Bytes()
}

// tenantBuild uploads context under hash for a new template of team and
// runs steps over the base through the service, as the E2B flow does.
func (f *fixture) tenantBuild(t *testing.T, team, name, hash string, context []byte, steps ...Step) (*templates.Build, string) {
	t.Helper()
	ctx := t.Context()
	tpl, bd, err := f.svc.CreateTemplate(ctx, templates.CreateRequest{TeamID: team, Name: name})
	if err != nil {
		t.Fatal(err)
	}
	if context != nil {
		present, _, err := f.svc.Files(ctx, team, tpl.ID, hash)
		if err != nil || present {
			t.Fatalf("Files = %v, %v", present, err)
		}
		if err := f.svc.PutFiles(ctx, tpl.ID, hash, bytes.NewReader(context)); err != nil {
			t.Fatalf("upload: %v", err)
		}
	}
	for i := range steps {
		if steps[i].Type == StepCopy || steps[i].Type == StepAdd {
			steps[i].FilesHash = hash
		}
	}
	if _, err := f.svc.StartBuild(ctx, StartRequest{TeamID: team, TemplateID: tpl.ID, BuildID: bd.ID, Spec: Spec{FromTemplate: "base", Steps: steps}}); err != nil {
		t.Fatalf("StartBuild: %v", err)
	}
	done, err := f.svc.Wait(ctx, bd.ID)
	if err != nil {
		t.Fatal(err)
	}
	return done, f.logs(t, bd.ID)
}

const tenantHash = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"

// TestCopyCannotReadHost: COPY sources are resolved inside the uploaded
// context. Symbolic links in it (to "/", or climbing out with "..") are
// never followed onto the host; they are copied as links. ".." and
// absolute sources are refused with an error naming the step.
func TestCopyCannotReadHost(t *testing.T) {
	needRoot(t)
	t.Parallel()
	f := newFixture(t, tinyRootFS(t))
	// A host file the attack must not reach.
	secret := filepath.Join(f.dir, "host-secret")
	if err := os.WriteFile(secret, []byte("host secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	up := gzipped(craftTar(t, []entry{
		{name: "root", typ: tar.TypeSymlink, link: "/"},
		{name: "d/", typ: tar.TypeDir, mode: 0o755},
		{name: "d/up", typ: tar.TypeSymlink, link: "../../../../../../../../.."},
		{name: "d/ok.txt", typ: tar.TypeReg, body: "ok\n"},
	}))
	escapes := []struct{ name, src string }{
		{"root-link", "root" + secret},
		{"root-link-shadow", "root/etc/shadow"},
		{"nested-up", "d/up" + secret},
		{"nested-up-environ", "d/up/proc/self/environ"},
		{"glob-through-link", "roo?" + secret},
		{"glob-dir-through-link", "d/u*/proc/self/environ"},
		{"tree-through-link", "root" + filepath.Dir(secret)},
	}
	for _, c := range escapes {
		t.Run(c.name, func(t *testing.T) {
			bd, logs := f.tenantBuild(t, "team-a", "escape-"+c.name, tenantHash, up,
				Step{Type: StepCopy, Args: []string{c.src, "/stolen"}})
			if bd.Status != templates.BuildError {
				t.Fatalf("COPY %s: build %s, want error\n%s", c.src, bd.Status, logs)
			}
			if bd.Reason == nil || bd.Reason.Step != "1" {
				t.Errorf("reason %+v, want step 1", bd.Reason)
			}
			if strings.Contains(logs, "host secret") {
				t.Errorf("host file content in the logs:\n%s", logs)
			}
		})
	}
	for _, c := range []struct{ name, src, want string }{
		{"dotdot", "../../etc/shadow", "outside the build context"},
		{"dotdot-inside", "d/../../x", "outside the build context"},
		{"absolute", "/etc/shadow", "absolute"},
	} {
		t.Run(c.name, func(t *testing.T) {
			bd, logs := f.tenantBuild(t, "team-a", "refused-"+c.name, tenantHash, up,
				Step{Type: StepCopy, Args: []string{c.src, "/stolen"}})
			if bd.Status != templates.BuildError || bd.Reason == nil || bd.Reason.Step != "1" || !strings.Contains(bd.Reason.Message, c.want) {
				t.Fatalf("COPY %s: %s %+v, want an error of step 1 saying %q\n%s", c.src, bd.Status, bd.Reason, c.want, logs)
			}
		})
	}
	t.Run("links copied as links", func(t *testing.T) {
		bd, logs := f.tenantBuild(t, "team-a", "links", tenantHash, up,
			Step{Type: StepCopy, Args: []string{".", "/ctx/"}},
			Step{Type: StepCopy, Args: []string{"root", "/toplink"}},
			// ".." that stays inside the context is allowed, as the SDK does.
			Step{Type: StepCopy, Args: []string{"d/../d/ok.txt", "/ok.txt"}})
		if bd.Status != templates.BuildReady {
			t.Fatalf("build %s %+v\n%s", bd.Status, bd.Reason, logs)
		}
		for p, want := range map[string]string{"ctx/root": "/", "ctx/d/up": "../../../../../../../../..", "toplink": "/"} {
			got, err := os.Readlink(filepath.Join(bd.RootFSDir, p))
			if err != nil || got != want {
				t.Errorf("%s: link %q, %v; want a link to %q", p, got, err, want)
			}
		}
		for _, p := range []string{"ctx/d/ok.txt", "ok.txt"} {
			if got := readFile(t, bd.RootFSDir, p); got != "ok\n" {
				t.Errorf("%s = %q", p, got)
			}
		}
	})
}

// TestLayerCacheScoped: the layer cache is keyed on what was uploaded (a
// digest the server computes) and scoped per team, never on the client's
// filesHash alone. Team B uploading its own content under the hash team A
// uses, or a second template of A with other content under the same hash,
// gets its own layer; only A's repeat of its own build hits the cache.
func TestLayerCacheScoped(t *testing.T) {
	needRoot(t)
	t.Parallel()
	f := newFixture(t, tinyRootFS(t))
	steps := func() []Step {
		return []Step{
			{Type: StepCopy, Args: []string{"app", "/app"}},
			{Type: StepRun, Args: []string{"cat /app/who.txt > /ran.txt"}},
		}
	}
	upload := func(who string) []byte { return gzTar(t, map[string]string{"app/who.txt": who + "\n"}) }
	check := func(name string, bd *templates.Build, logs, who string, wantCached bool) {
		t.Helper()
		if bd.Status != templates.BuildReady {
			t.Fatalf("%s: build %s %+v\n%s", name, bd.Status, bd.Reason, logs)
		}
		for _, p := range []string{"app/who.txt", "ran.txt"} {
			if got := readFile(t, bd.RootFSDir, p); got != who+"\n" {
				t.Errorf("%s: %s = %q, want %q (another upload's layer)", name, p, got, who+"\n")
			}
		}
		if cached := strings.Contains(logs, "CACHED [1]"); cached != wantCached {
			t.Errorf("%s: COPY step cached %v, want %v\n%s", name, cached, wantCached, logs)
		}
	}
	bd, logs := f.tenantBuild(t, "team-a", "a-first", tenantHash, upload("a"), steps()...)
	check("team A", bd, logs, "a", false)
	bd, logs = f.tenantBuild(t, "team-b", "b-planted", tenantHash, upload("b"), steps()...)
	check("team B, same hash, other content", bd, logs, "b", false)
	bd, logs = f.tenantBuild(t, "team-a", "a-other-template", tenantHash, upload("c"), steps()...)
	check("team A, other template, same hash, other content", bd, logs, "c", false)
	bd, logs = f.tenantBuild(t, "team-b", "b-same-content", tenantHash, upload("a"), steps()...)
	check("team B, A's exact content", bd, logs, "a", false)
	bd, logs = f.tenantBuild(t, "team-a", "a-again", tenantHash, upload("a"), steps()...)
	check("team A again", bd, logs, "a", true)
}

// TestBuildLimits: a RUN step that floods its output has the log capped
// (the rest dropped with a note, the build unaffected); an upload that
// unpacks past the context limits (a gzip bomb, a flood of entries) fails
// its COPY step with a clear message.
func TestBuildLimits(t *testing.T) {
	needRoot(t)
	t.Parallel()
	f := newFixtureCfg(t, tinyRootFS(t), ChrootRunner{}, func(c *Config) {
		c.Limits = Limits{LogLines: 100, LogBytes: 1 << 20, ContextBytes: 1 << 20, ContextEntries: 100}
	})
	t.Run("log flood", func(t *testing.T) {
		bd, logs := f.tenantBuild(t, "team-a", "flood", "", nil,
			Step{Type: StepRun, Args: []string{`i=0; while [ $i -lt 5000 ]; do echo "line $i"; i=$((i+1)); done`}})
		if bd.Status != templates.BuildReady {
			t.Fatalf("build %s %+v", bd.Status, bd.Reason)
		}
		n := strings.Count(logs, "\n")
		if n > 100+3 || !strings.Contains(logs, "Build log limit reached") || !strings.Contains(logs, "were dropped") || strings.Contains(logs, "line 4999") {
			t.Errorf("%d entries stored for a limit of 100:\n%.2000s", n, logs)
		}
		if !strings.Contains(logs, "Build finished") {
			t.Errorf("the build's result was dropped with the output")
		}
	})
	t.Run("gzip bomb", func(t *testing.T) {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		tw := tar.NewWriter(zw)
		tw.WriteHeader(&tar.Header{Name: "app/zeros", Typeflag: tar.TypeReg, Mode: 0o644, Size: 32 << 20})
		tw.Write(make([]byte, 32<<20))
		tw.Close()
		zw.Close()
		bd, logs := f.tenantBuild(t, "team-a", "bomb", tenantHash, buf.Bytes(), Step{Type: StepCopy, Args: []string{"app", "/app"}})
		if bd.Status != templates.BuildError || bd.Reason == nil || bd.Reason.Step != "1" || !strings.Contains(bd.Reason.Message, "uploaded build context") {
			t.Errorf("gzip bomb: %s %+v\n%s", bd.Status, bd.Reason, logs)
		}
	})
	t.Run("entry flood", func(t *testing.T) {
		files := map[string]string{}
		for i := range 500 {
			files["app/f"+strings.Repeat("x", i%7)+string(rune('a'+i%26))+string(rune('a'+i/26))] = ""
		}
		bd, logs := f.tenantBuild(t, "team-a", "entries", tenantHash, gzTar(t, files), Step{Type: StepCopy, Args: []string{"app", "/app"}})
		if bd.Status != templates.BuildError || bd.Reason == nil || !strings.Contains(bd.Reason.Message, "entries") {
			t.Errorf("500 entries over a limit of 100: %s %+v\n%s", bd.Status, bd.Reason, logs)
		}
	})
}

// TestUploadQuotaAndDiskBound: a team's uploads are bounded in number
// and stored bytes (429, the other team unaffected), and a template
// cannot ask for more disk than the operator allows.
func TestUploadQuotaAndDiskBound(t *testing.T) {
	needRoot(t)
	t.Parallel()
	ctx := t.Context()
	f := newFixture(t, tinyRootFS(t))
	svc, err := NewService(ServiceConfig{Builder: f.b, MaxTeamUploads: 2, MaxTeamUploadBytes: 64 << 10, MaxTemplateDiskMB: 8192})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.cancel)
	mux := http.NewServeMux()
	mux.Handle(UploadPathPrefix, svc.UploadHandler())
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	if _, _, err := svc.CreateTemplate(ctx, templates.CreateRequest{TeamID: "team-a", Name: "huge", DiskMB: 8193}); !errdefs.IsInvalid(err) || !strings.Contains(err.Error(), "8192") {
		t.Errorf("disk above the bound: %v, want invalid naming the bound", err)
	}
	if _, err := svc.StartBuild(ctx, StartRequest{TeamID: "team-a", Create: templates.CreateRequest{Name: "huge2", DiskMB: 1 << 20}, Spec: Spec{FromTemplate: "base"}}); !errdefs.IsInvalid(err) {
		t.Errorf("one-call build with disk above the bound: %v, want invalid", err)
	}
	tplA, _, err := svc.CreateTemplate(ctx, templates.CreateRequest{TeamID: "team-a", Name: "quota-a", DiskMB: 8192})
	if err != nil {
		t.Fatal(err)
	}
	tplB, _, err := svc.CreateTemplate(ctx, templates.CreateRequest{TeamID: "team-b", Name: "quota-b"})
	if err != nil {
		t.Fatal(err)
	}
	upload := func(tplID, team string, i int, body []byte) int {
		t.Helper()
		hash := strings.Repeat(string(rune('a'+i)), 64)
		_, path, err := svc.Files(ctx, team, tplID, hash)
		if err != nil {
			if errdefs.IsExhausted(err) {
				return http.StatusTooManyRequests
			}
			t.Fatal(err)
		}
		return put(t, srv.URL+path, body)
	}
	small := gzTar(t, map[string]string{"a.txt": "a"})
	for i := range 2 {
		if code := upload(tplA.ID, "team-a", i, small); code != http.StatusCreated {
			t.Fatalf("upload %d: %d", i, code)
		}
	}
	if code := upload(tplA.ID, "team-a", 2, small); code != http.StatusTooManyRequests {
		t.Errorf("third upload of a team allowed two: %d, want 429", code)
	}
	if code := upload(tplB.ID, "team-b", 0, small); code != http.StatusCreated {
		t.Errorf("another team's upload: %d, want 201", code)
	}
	// Bytes: random content does not compress; 100 KiB stored is over
	// team B's 64 KiB.
	big := make([]byte, 100<<10)
	rand.Read(big)
	if code := upload(tplB.ID, "team-b", 1, gzTar(t, map[string]string{"big": string(big)})); code != http.StatusTooManyRequests {
		t.Errorf("upload over the team's bytes: %d, want 429", code)
	}
}

// TestRunCannotFillHostDisk: a RUN step writes into a scratch space of
// the template's disk size; one that fills it fails the build (ENOSPC),
// not the host's disk, and the build log says why.
func TestRunCannotFillHostDisk(t *testing.T) {
	needRoot(t)
	t.Parallel()
	ctx := t.Context()
	f := newFixture(t, tinyRootFS(t))
	tpl, bd, err := f.svc.CreateTemplate(ctx, templates.CreateRequest{TeamID: "team-a", Name: "filler", DiskMB: 32})
	if err != nil {
		t.Fatal(err)
	}
	// 1 MiB in a variable, appended until the disk is full (the tiny root
	// file system has no dd); 256 MiB at most.
	fill := `s=x; i=0; while [ $i -lt 20 ]; do s=$s$s; i=$((i+1)); done; i=0; while [ $i -lt 256 ]; do printf %s "$s" >> /big || exit 7; i=$((i+1)); done`
	spec := Spec{FromTemplate: "base", Steps: []Step{{Type: StepRun, Args: []string{fill}}}}
	if _, err := f.svc.StartBuild(ctx, StartRequest{TeamID: "team-a", TemplateID: tpl.ID, BuildID: bd.ID, Spec: spec}); err != nil {
		t.Fatal(err)
	}
	done, err := f.svc.Wait(ctx, bd.ID)
	if err != nil {
		t.Fatal(err)
	}
	if done.Status != templates.BuildError || done.Reason == nil || done.Reason.Step != "1" || !strings.Contains(done.Reason.Message, "scratch space of 32 MiB") {
		t.Fatalf("filling the disk: %s %+v\n%s", done.Status, done.Reason, f.logs(t, bd.ID))
	}
	// Nothing of the step's writes is left on the host.
	filepath.Walk(f.dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() && fi.Size() > 40<<20 && !strings.HasSuffix(p, ".img") {
			t.Errorf("%s: %d bytes on the host's disk", p, fi.Size())
		}
		return nil
	})

	// Within the size, the step's files land in the template.
	tpl2, bd2, err := f.svc.CreateTemplate(ctx, templates.CreateRequest{TeamID: "team-a", Name: "fits", DiskMB: 64})
	if err != nil {
		t.Fatal(err)
	}
	spec.Steps[0].Args[0] = `s=x; i=0; while [ $i -lt 20 ]; do s=$s$s; i=$((i+1)); done; i=0; while [ $i -lt 8 ]; do printf %s "$s" >> /big || exit 7; i=$((i+1)); done`
	if _, err := f.svc.StartBuild(ctx, StartRequest{TeamID: "team-a", TemplateID: tpl2.ID, BuildID: bd2.ID, Spec: spec}); err != nil {
		t.Fatal(err)
	}
	ok, err := f.svc.Wait(ctx, bd2.ID)
	if err != nil || ok.Status != templates.BuildReady {
		t.Fatalf("8 MiB in 64: %+v, %v\n%s", ok, err, f.logs(t, bd2.ID))
	}
	if fi, err := os.Stat(filepath.Join(ok.RootFSDir, "big")); err != nil || fi.Size() != 8<<20 {
		t.Errorf("/big in the template: %v, %v", fi, err)
	}
}

// TestCopyDestinationStaysInTree: links in the build's own tree (here
// copied in from the upload, as an image could hold them) are resolved
// inside the tree when a later COPY, WORKDIR or USER writes through them.
func TestCopyDestinationStaysInTree(t *testing.T) {
	needRoot(t)
	t.Parallel()
	f := newFixture(t, tinyRootFS(t))
	host := t.TempDir()
	up := gzipped(craftTar(t, []entry{
		{name: "out", typ: tar.TypeSymlink, link: host},
		{name: "up", typ: tar.TypeSymlink, link: "../../../../../../.." + host},
		{name: "f.txt", typ: tar.TypeReg, body: "tenant\n"},
	}))
	bd, logs := f.tenantBuild(t, "team-a", "dest", tenantHash, up,
		Step{Type: StepCopy, Args: []string{"out", "/out"}},
		Step{Type: StepCopy, Args: []string{"up", "/etc/up"}},
		Step{Type: StepCopy, Args: []string{"f.txt", "/out/victim"}},
		Step{Type: StepCopy, Args: []string{"f.txt", "/etc/up/victim2"}},
		Step{Type: StepWorkdir, Args: []string{"/out/wd"}},
	)
	if bd.Status != templates.BuildReady {
		t.Fatalf("build %s %+v\n%s", bd.Status, bd.Reason, logs)
	}
	if entries, _ := os.ReadDir(host); len(entries) != 0 {
		t.Fatalf("written on the host through the tree's links: %v", entries)
	}
	for _, p := range []string{"victim", "victim2"} {
		if got := readFile(t, filepath.Join(bd.RootFSDir, host), p); got != "tenant\n" {
			t.Errorf("%s inside the tree: %q", p, got)
		}
	}
}
