//go:build e2e

package templatese2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/warren-sandbox/warren/e2e/e2eserve"
)

// runWarren runs bin/warren with the server's exports (E2B_API_URL,
// E2B_API_KEY) in its environment and returns its combined output and
// exit code.
func runWarren(t *testing.T, s *e2eserve.Server, args ...string) (string, int) {
	t.Helper()
	return s.Run(t, nil, os.Getenv("WARREN_WARREN"), args...)
}

// TestWarrenTemplateBuild builds a Dockerfile (FROM base, ARG, ENV,
// WORKDIR, COPY with a .dockerignore, RUN as root and as USER user, CMD as
// the start command) with `warren template build` against warren serve,
// checks a sandbox of it with the E2B SDK, lists it, builds a Dockerfile
// whose RUN fails, and deletes both.
func TestWarrenTemplateBuild(t *testing.T) {
	e2eserve.Prerequisites(t)
	s := startServe(t, t.TempDir())
	name := fmt.Sprintf("e2e-warren-%d", os.Getpid())
	dir := filepath.Join(t.TempDir(), "app")
	files := map[string]string{
		"hello.txt": "hello\n", "sub/deep.txt": "deep\n", "sub/skip.log": "ignored\n", ".dockerignore": "sub/*.log\n",
		"Dockerfile": `FROM base
ARG WHO=world
ENV GREETING=hi APPDIR=/opt/app
WORKDIR $APPDIR
COPY hello.txt ./
COPY sub $APPDIR/sub/
RUN echo "$GREETING $WHO" > greeting.txt && id -un > builder.txt
USER user
RUN whoami > /home/user/who.txt && echo step-output-line
CMD ["/bin/sh", "-c", "echo started with $GREETING > /home/user/started; exec sleep 86400"]
`,
		"Dockerfile.fail": "FROM base\nRUN echo failing-output; exit 4\n",
	}
	for n, content := range files {
		p := filepath.Join(dir, n)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	out, code := runWarren(t, s, "template", "build", "--name", name, "--build-arg", "WHO=warren", "--ready-cmd", "test -s /home/user/started", dir)
	t.Logf("warren template build:\n%s", out)
	if code != 0 {
		t.Fatalf("warren template build exited %d", code)
	}
	for _, want := range []string{"8 steps", "[8/8]", "step-output-line", "template " + name + " ready"} {
		if !strings.Contains(out, want) {
			t.Errorf("build output lacks %q", want)
		}
	}
	if out := s.Node(t, "warren_cli_check.mjs", name); !strings.Contains(out, "OK") {
		t.Fatalf("sandbox check did not finish:\n%s", out)
	}
	if out, code := runWarren(t, s, "template", "list"); code != 0 || !regexp.MustCompile(`(?m)^\S+\s+`+regexp.QuoteMeta(name)+`\s.*\sready\s`).MatchString(out) {
		t.Errorf("warren template list: exit %d:\n%s", code, out)
	}

	out, code = runWarren(t, s, "template", "build", "--name", name+"-fail", "-f", filepath.Join(dir, "Dockerfile.fail"), dir)
	if code == 0 {
		t.Fatalf("a failing RUN built:\n%s", out)
	}
	for _, want := range []string{"warren: template " + name + "-fail: build", "step 1", "exit code 4", "failing-output"} {
		if !strings.Contains(out, want) {
			t.Errorf("failing build output lacks %q:\n%s", want, out)
		}
	}

	if out, code := runWarren(t, s, "template", "delete", name, name+"-fail"); code != 0 {
		t.Fatalf("warren template delete: exit %d:\n%s", code, out)
	}
	if out, _ := runWarren(t, s, "template", "list"); strings.Contains(out, name) {
		t.Errorf("warren template list after delete:\n%s", out)
	}
}
