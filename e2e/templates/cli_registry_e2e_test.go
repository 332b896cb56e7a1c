//go:build e2e

package templatese2e

import (
	"compress/gzip"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/warren-sandbox/warren/e2e/e2eserve"
)

// pushBaseImage serves an in-process OCI registry on loopback for the
// test and pushes an image of the base root filesystem ($WARREN_TEST_ROOTFS_TAR)
// with env in its config; it returns the image's reference.
func pushBaseImage(t *testing.T, env ...string) string {
	t.Helper()
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	tarPath := os.Getenv("WARREN_TEST_ROOTFS_TAR")
	l, err := tarball.LayerFromFile(tarPath, tarball.WithCompressionLevel(gzip.BestSpeed))
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, l)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Config = v1.Config{Env: env, WorkingDir: "/srv", User: "nobody"}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	ref := strings.TrimPrefix(srv.URL, "http://") + "/warren-e2e/base:bookworm"
	nr, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(nr, img); err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
	return ref
}

// TestCLITemplateCreateFromRegistry builds, with `e2b template create`, a
// Dockerfile whose FROM names an image in an OCI registry the test serves
// (the base root filesystem with ENV in its config): the image's
// environment, the RUN's output and the CMD (the start command) reach a
// sandbox of the template; the default user and working directory are the
// CLI's.
func TestCLITemplateCreateFromRegistry(t *testing.T) {
	e2eserve.Prerequisites(t)
	e2eserve.Require(t, e2eserve.Exists(cliPath), "e2e/node_modules/@e2b/cli missing; run npm ci in e2e/")
	ref := pushBaseImage(t, "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "IMAGE_ENV=from-the-image")
	// The registry is on loopback: the operator allows it (pulls reach
	// public addresses only by default).
	registryHost, _, _ := strings.Cut(ref, "/")
	s := e2eserve.Start(t, e2eserve.Options{DataDir: t.TempDir(), APIKey: apiKey, Isolation: iso,
		ExtraArgs: []string{"--egress-allow", registryHost}})
	dir := t.TempDir()
	// The CLI makes CMD the start command, with `sleep 20` as the ready
	// command.
	dockerfile := fmt.Sprintf("FROM %s\nCOPY hello.txt /opt/\nRUN echo \"ran with $IMAGE_ENV\" > /opt/run.txt\n"+
		"CMD echo \"cmd ran with $IMAGE_ENV\" > /tmp/cmd.txt && exec sleep 86401\n", ref)
	for f, body := range map[string]string{"Dockerfile": dockerfile, "hello.txt": "copied next to a registry image\n"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	name := fmt.Sprintf("e2e-cli-reg-%d", os.Getpid())
	out, code := runCLI(t, s, "template", "create", name, "-p", dir)
	t.Logf("e2b template create:\n%s", out)
	if code != 0 {
		t.Fatalf("e2b template create exited %d", code)
	}
	if !strings.Contains(out, "FROM "+ref) || !strings.Contains(out, "Waiting for ready command: sleep 20") || !strings.Contains(out, "Building sandbox template "+name+" finished") {
		t.Errorf("output lacks the pull of %s or the final message", ref)
	}
	got := s.Node(t, "sandbox_run.mjs", name, `cat /opt/hello.txt /opt/run.txt /tmp/cmd.txt; echo "$IMAGE_ENV"; id -un; pwd; pgrep -f "sleep 86401" >/dev/null && echo cmd-running`)
	want := "exit 0\ncopied next to a registry image\nran with from-the-image\ncmd ran with from-the-image\nfrom-the-image\nuser\n/home/user\ncmd-running\n"
	if got != want {
		t.Errorf("sandbox sees %q, want %q", got, want)
	}
}
