package builder

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/warren-sandbox/warren/internal/egress"
	"github.com/warren-sandbox/warren/internal/node/layer"
	"github.com/warren-sandbox/warren/internal/templates"
	"github.com/warren-sandbox/warren/internal/testenv"
)

// needRoot skips (or fails under CI=true) a test that mounts overlays and
// chroots.
func needRoot(t testing.TB) {
	t.Helper()
	testenv.NeedRoot(t, "builder tests (overlay mounts, chroot)")
}

// tinyRootFS is a tar of a minimal root filesystem made from the host's
// dash (as /bin/sh) and cat with their libraries: enough for RUN steps of
// simple shell commands.
func tinyRootFS(t testing.TB) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	addDir := func(d string) {
		parts := strings.Split(strings.Trim(d, "/"), "/")
		for i := range parts {
			p := strings.Join(parts[:i+1], "/")
			if p == "" || dirs[p] {
				continue
			}
			dirs[p] = true
			mode := int64(0o755)
			if p == "tmp" {
				mode = 0o1777
			}
			tw.WriteHeader(&tar.Header{Name: p + "/", Typeflag: tar.TypeDir, Mode: mode, ModTime: time.Unix(1700000000, 0)})
		}
	}
	addFile := func(name string, mode int64, body []byte) {
		addDir(filepath.Dir(name))
		tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: mode, Size: int64(len(body)), ModTime: time.Unix(1700000000, 0)})
		tw.Write(body)
	}
	hostFile := func(src, dst string) {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatalf("tiny rootfs: %v", err)
		}
		addFile(dst, 0o755, b)
	}
	bins := map[string]string{"bin/sh": "/usr/bin/dash", "bin/cat": "/usr/bin/cat"}
	libs := map[string]bool{}
	for dst, src := range bins {
		hostFile(src, dst)
		out, err := exec.Command("ldd", src).Output()
		if err != nil {
			t.Fatalf("ldd %s: %v", src, err)
		}
		for _, m := range regexp.MustCompile(`(/\S+\.so[.\d]*)`).FindAllString(string(out), -1) {
			libs[m] = true
		}
	}
	for l := range libs {
		real, err := filepath.EvalSymlinks(l)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(real)
		if err != nil {
			t.Fatal(err)
		}
		addFile(strings.TrimPrefix(l, "/"), 0o755, b)
	}
	addDir("tmp")
	addDir("root")
	addFile("etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"))
	addFile("etc/group", 0o644, []byte("root:x:0:\nnogroup:x:65534:\n"))
	tw.Close()
	return buf.Bytes()
}

// testRegistry is an in-process OCI registry on loopback, optionally
// behind basic auth.
type testRegistry struct {
	host       string
	user, pass string
}

func newRegistry(t *testing.T, user, pass string) *testRegistry {
	t.Helper()
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	h := reg
	if user != "" {
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			u, p, ok := r.BasicAuth()
			if !ok || u != user || p != pass {
				w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
				http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`, http.StatusUnauthorized)
				return
			}
			reg.ServeHTTP(w, r)
		})
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &testRegistry{host: strings.TrimPrefix(srv.URL, "http://"), user: user, pass: pass}
}

// allowIn is the operator's allow entry for the registry's loopback
// address (warren serve --egress-allow) in f's builder: pulls from it are
// refused without one.
func (r *testRegistry) allowIn(f *fixture) {
	f.b.cfg.Transport = (&egress.Dialer{Policy: egress.MustParse(r.host)}).Transport()
}

// push stores an image made of rootfs (a tar) with cfg under repo:tag and
// returns its reference.
func (r *testRegistry) push(t *testing.T, repo string, rootfs []byte, cfg v1.Config) string {
	t.Helper()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(rootfs)), nil })
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, l)
	if err != nil {
		t.Fatal(err)
	}
	if img, err = mutate.Config(img, cfg); err != nil {
		t.Fatal(err)
	}
	ref := r.host + "/" + repo
	nr, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	var auth authn.Authenticator = authn.Anonymous
	if r.user != "" {
		auth = &authn.Basic{Username: r.user, Password: r.pass}
	}
	if err := remote.Write(nr, img, remote.WithAuth(auth)); err != nil {
		t.Fatal(err)
	}
	return ref
}

// fixture is a catalog with a base template (the tiny root filesystem), a
// builder with the chroot runner, and a service.
type fixture struct {
	cat *templates.Catalog
	b   *Builder
	svc *Service
	dir string
}

func newFixture(t testing.TB, base []byte) *fixture {
	t.Helper()
	return newFixtureWith(t, base, ChrootRunner{})
}

func newFixtureWith(t testing.TB, base []byte, runner Runner) *fixture {
	t.Helper()
	return newFixtureCfg(t, base, runner, nil)
}

// newFixtureCfg is newFixtureWith with the builder's Config changed by
// edit (when set).
func newFixtureCfg(t testing.TB, base []byte, runner Runner, edit func(*Config)) *fixture {
	t.Helper()
	needRoot(t)
	dir := t.TempDir()
	cat, err := templates.New(templates.Config{DataDir: filepath.Join(dir, "templates"), Mmdebstrap: "/nonexistent", UnpackRootFS: layer.UnpackRootFS})
	if err != nil {
		t.Fatal(err)
	}
	if base != nil {
		p := filepath.Join(dir, "base.tar")
		if err := os.WriteFile(p, base, 0o644); err != nil {
			t.Fatal(err)
		}
		cat, err = templates.New(templates.Config{DataDir: filepath.Join(dir, "templates"), BaseRootFSTar: p, UnpackRootFS: layer.UnpackRootFS})
		if err != nil {
			t.Fatal(err)
		}
		if err := cat.EnsureBase(context.Background(), nil); err != nil {
			t.Fatal(err)
		}
	}
	cfg := Config{
		DataDir: filepath.Join(dir, "builder"), Catalog: cat, Runner: runner,
		ReadyInterval: 50 * time.Millisecond, ReadyTimeout: time.Minute,
	}
	if edit != nil {
		edit(&cfg)
	}
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := NewService(ServiceConfig{Builder: b})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	return &fixture{cat: cat, b: b, svc: svc, dir: dir}
}

// build creates a build for name and runs spec synchronously.
func (f *fixture) build(t testing.TB, team, name string, spec Spec) (*templates.Build, error) {
	t.Helper()
	ctx := context.Background()
	_, bd, err := f.cat.CreateBuild(ctx, templates.CreateRequest{TeamID: team, Name: name})
	if err != nil {
		t.Fatal(err)
	}
	spec.TeamID = team
	berr := f.b.Build(ctx, bd.ID, spec)
	got, err := f.cat.Build(ctx, bd.ID)
	if err != nil {
		t.Fatal(err)
	}
	return got, berr
}

func (f *fixture) logs(t testing.TB, buildID string) string {
	t.Helper()
	entries, err := f.cat.Store().Logs(context.Background(), buildID, 0)
	if err != nil {
		t.Fatal(err)
	}
	var sb strings.Builder
	for _, e := range entries {
		sb.WriteString(e.Step + "|" + string(e.Level) + "|" + e.Message + "\n")
	}
	return sb.String()
}

func readFile(t testing.TB, root, p string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, p))
	if err != nil {
		t.Fatalf("%s: %v", p, err)
	}
	return string(b)
}
