package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/buildkit/frontend/dockerfile/shell"

	"github.com/warren-sandbox/warren/e2e/e2eserve"
	"github.com/warren-sandbox/warren/internal/builder"
	"github.com/warren-sandbox/warren/internal/templates"
	"github.com/warren-sandbox/warren/internal/testenv"
	"github.com/warren-sandbox/warren/pkg/client"
)

func runTemplate(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	cmd := templateCommand()
	cmd.SilenceUsage = true
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), err
}

// writeFiles writes name → content under dir ("->target" makes a link).
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		var err error
		if target, ok := strings.CutPrefix(content, "->"); ok {
			err = os.Symlink(target, p)
		} else {
			err = os.WriteFile(p, []byte(content), 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

func TestAPISteps(t *testing.T) {
	t.Parallel()
	step := func(typ string, args ...string) client.TemplateStep {
		return client.TemplateStep{Type: typ, Args: args, Expand: typ != "RUN"}
	}
	literal := func(typ string, args ...string) client.TemplateStep {
		return client.TemplateStep{Type: typ, Args: args}
	}
	for _, tc := range []struct {
		name       string
		dockerfile string
		buildArgs  map[string]string
		want       []client.TemplateStep
		wantSrcs   map[int]string
		wantErr    string
	}{
		{
			name:       "every step type, sent as written for the server to expand",
			dockerfile: "FROM base\nARG WHO=world\nENV GREETING=hi DIR=/opt/app\nWORKDIR $DIR\nCOPY --chown=user --chmod=0755 a.sh ${DIR}/bin/\nADD b.tgz /srv/\nRUN echo \"$GREETING $WHO\"\nUSER $WHO\n",
			want: []client.TemplateStep{
				step("ARG", "WHO", "world"), step("ENV", "GREETING", "hi", "DIR", "/opt/app"), step("WORKDIR", "$DIR"),
				step("COPY", "a.sh", "${DIR}/bin/", "user", "0755"), step("ADD", "b.tgz", "/srv/", "", ""),
				literal("RUN", `echo "$GREETING $WHO"`), step("USER", "$WHO"),
			},
			wantSrcs: map[int]string{3: "a.sh", 4: "b.tgz"},
		},
		{
			name:       "a build arg is literal and wins over the default",
			dockerfile: "FROM base\nARG WHO=world\nARG V=1\nENV V=2\nWORKDIR /w/$WHO/$V\n",
			buildArgs:  map[string]string{"WHO": "$warren"},
			want:       []client.TemplateStep{literal("ARG", "WHO", "$warren"), step("ARG", "V", "1"), step("ENV", "V", "2"), step("WORKDIR", "/w/$WHO/$V")},
		},
		{
			name:       "variables of the base image go to the server",
			dockerfile: "FROM base\nENV PATH=/opt/bin:$PATH\nWORKDIR $HOME/app\nENV C=${LATER:-d}\nARG LATER\n",
			want:       []client.TemplateStep{step("ENV", "PATH", "/opt/bin:$PATH"), step("WORKDIR", "$HOME/app"), step("ENV", "C", "${LATER:-d}"), step("ARG", "LATER", "")},
		},
		{
			name:       "a COPY source is resolved here from ARG and ENV (ENV over ARG, build args) and sent escaped",
			dockerfile: "FROM base\nARG SRC=a\nARG DIR=x\nENV DIR=y\nARG B=${SRC}1\nCOPY --chown=$U $SRC/$DIR/f\\$1.txt $B/ /dst/\n",
			buildArgs:  map[string]string{"SRC": "s"},
			want: []client.TemplateStep{
				literal("ARG", "SRC", "s"), step("ARG", "DIR", "x"), step("ENV", "DIR", "y"), step("ARG", "B", "${SRC}1"),
				step("COPY", `s/y/f\$1.txt`, "/dst/", "$U", ""), step("COPY", "s1/", "/dst/", "$U", ""),
			},
			wantSrcs: map[int]string{4: "s/y/f$1.txt", 5: "s1/"},
		},
		{
			name:       "a COPY source of a base image variable",
			dockerfile: "FROM base\nCOPY $HOME/x /y\n",
			wantErr:    "$HOME has no value from the Dockerfile's ARG and ENV",
		},
		{
			name:       "a COPY source through an ENV of a base image variable",
			dockerfile: "FROM base\nARG P=a\nENV P=$PATH\nCOPY $P /y\n",
			wantErr:    "$P has no value from the Dockerfile's ARG and ENV",
		},
		{
			name:       "RUN is left to the shell",
			dockerfile: "FROM base\nRUN echo $HOME $UNKNOWN\n",
			want:       []client.TemplateStep{literal("RUN", "echo $HOME $UNKNOWN")},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			spec, _, err := builder.ParseDockerfile(strings.NewReader(tc.dockerfile), tc.buildArgs)
			if err != nil {
				t.Fatal(err)
			}
			got, srcs, err := apiSteps(spec)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("steps\n got %v\nwant %v", got, tc.want)
			}
			if tc.wantSrcs == nil {
				tc.wantSrcs = map[int]string{}
			}
			if !maps.Equal(srcs, tc.wantSrcs) {
				t.Errorf("sources %v, want %v", srcs, tc.wantSrcs)
			}
		})
	}
}

// TestEscapeWord checks that the server's expansion of an escaped COPY
// source gives the source back.
func TestEscapeWord(t *testing.T) {
	t.Parallel()
	lex := shell.NewLex('\\')
	for _, s := range []string{"plain.txt", `a\b$c'd"e f*[x]?.txt`, "$HOME", "${A:-b}", `x\`, `\$`, "tab\there"} {
		t.Run(s, func(t *testing.T) {
			t.Parallel()
			got, _, err := lex.ProcessWord(escapeWord(s), envGetter{"HOME": "/root", "A": "a"})
			if err != nil || got != s {
				t.Errorf("expand(escapeWord(%q) = %q) = %q, %v", s, escapeWord(s), got, err)
			}
		})
	}
}

func TestBaseOf(t *testing.T) {
	t.Parallel()
	known := map[string]int{"base": 200, "myapp": 200, "theirs": 403, "broken": 500}
	for _, tc := range []struct {
		from, image, template, wantErr string
		asks                           bool
	}{
		{from: "", template: "base"},
		{from: "base", template: "base", asks: true},
		{from: "myapp:v2", template: "myapp:v2", asks: true},
		{from: "theirs", template: "theirs", asks: true},
		{from: "python:3.12", image: "python:3.12", asks: true},
		{from: "e2bdev/base", image: "e2bdev/base"},
		{from: "127.0.0.1:5000/x/y:t", image: "127.0.0.1:5000/x/y:t"},
		{from: "debian@sha256:0123", image: "debian@sha256:0123"},
		{from: "broken", wantErr: "500", asks: true},
	} {
		t.Run(tc.from, func(t *testing.T) {
			t.Parallel()
			asked := false
			lookup := func(_ context.Context, alias string) (*client.TemplateAlias, error) {
				asked = true
				switch st := known[alias]; st {
				case 200:
					return &client.TemplateAlias{TemplateID: alias}, nil
				case 0:
					return nil, &client.APIError{Status: http.StatusNotFound, Message: "not found"}
				default:
					return nil, fmt.Errorf("wrapped: %w", &client.APIError{Status: st, Message: "no"})
				}
			}
			image, template, err := baseOf(context.Background(), tc.from, lookup)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || image != tc.image || template != tc.template || asked != tc.asks {
				t.Errorf("baseOf(%q) = image %q, template %q, %v (asked the server: %v)", tc.from, image, template, err, asked)
			}
		})
	}
}

func TestTemplateCommandNeedsKey(t *testing.T) {
	t.Setenv("E2B_API_KEY", "")
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"Dockerfile": "FROM base\nRUN true\n"})
	for _, args := range [][]string{{"build", dir}, {"list"}, {"delete", "x"}} {
		if _, err := runTemplate(t, args...); err == nil || !strings.Contains(err.Error(), "--api-key") {
			t.Errorf("%v without a key: err = %v", args, err)
		}
	}
}

// serveRunsc runs `warren serve --driver runsc` in process, on host objects
// of its own and without a warm pool, and returns its API URL. The cleanup
// kills the sandboxes left, stops the server and removes what it made on
// the host.
func serveRunsc(t *testing.T, apiKey string) string {
	t.Helper()
	iso := e2eserve.Isolation{CgroupRoot: fmt.Sprintf("warren-clitest-%d", os.Getpid()), Table: fmt.Sprintf("warrenclitest%d", os.Getpid()),
		CIDR: "100.72.0.0/16", VethPrefix: "wc"}
	return startServeRunsc(t, apiKey, iso, "--pool-size", "0").url
}

// runscServer is a `warren serve --driver runsc` run in process.
type runscServer struct {
	url, dataDir string
	out, errb    *syncBuffer
	// stop kills the sandboxes left and stops the server gracefully (as
	// SIGTERM does); the cleanup calls it too.
	stop func()
}

// startServeRunsc starts `warren serve --driver runsc` on the host objects
// named by iso, with more serve flags extra.
func startServeRunsc(t *testing.T, apiKey string, iso e2eserve.Isolation, extra ...string) *runscServer {
	t.Helper()
	testenv.NeedRoot(t, "network namespaces, cgroups and runsc")
	for _, env := range []string{"WARREN_RUNSC", "WARREN_ENVD", "WARREN_TEST_ROOTFS_TAR"} {
		e2eserve.Require(t, e2eserve.Exists(os.Getenv(env)), fmt.Sprintf("$%s (%q) does not exist; run make build base-rootfs", env, os.Getenv(env)))
	}
	dataDir := t.TempDir()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	s := &runscServer{url: "http://" + addr, dataDir: dataDir, out: &syncBuffer{}, errb: &syncBuffer{}}
	root := newRoot(s.out, s.errb)
	root.SetArgs(append([]string{"serve", "--driver", "runsc", "--listen", addr, "--data-dir", dataDir, "--api-key", apiKey,
		"--runsc", os.Getenv("WARREN_RUNSC"), "--envd", os.Getenv("WARREN_ENVD"), "--base-rootfs", os.Getenv("WARREN_TEST_ROOTFS_TAR"),
		"--cgroup-root", iso.CgroupRoot, "--nft-table", iso.Table, "--net-cidr", iso.CIDR, "--veth-prefix", iso.VethPrefix}, extra...))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	var once sync.Once
	s.stop = func() {
		once.Do(func() {
			c := client.New(s.url, apiKey)
			if list, _, err := c.List(context.Background(), client.ListOptions{}); err == nil {
				for _, sb := range list {
					c.Kill(context.Background(), sb.SandboxID)
				}
			}
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("serve: %v", err)
				}
			case <-time.After(2 * time.Minute):
				t.Error("serve did not stop")
			}
		})
	}
	t.Cleanup(func() {
		s.stop()
		e2eserve.UnmountUnder(t, dataDir)
		iso.Cleanup()
		if t.Failed() {
			t.Logf("warren serve log:\n%s", s.errb.String())
		}
	})
	deadline := time.After(5 * time.Minute) // the first start unpacks the base root filesystem
	for !strings.Contains(s.out.String(), "E2B_API_KEY") {
		select {
		case err := <-done:
			t.Fatalf("serve exited: %v\n%s", err, s.errb.String())
		case <-deadline:
			t.Fatalf("serve printed no exports:\n%s", s.errb.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	return s
}

// readSandboxFile reads a file of a sandbox through the server's proxy to
// its envd; ok is false when the file does not exist.
func readSandboxFile(t *testing.T, apiURL string, sb *client.Sandbox, path string) (string, bool) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, apiURL+"/files?username=root&path="+path, nil)
	req.Header.Set("E2b-Sandbox-Id", sb.SandboxID)
	req.Header.Set("E2b-Sandbox-Port", "49983")
	req.Header.Set("X-Access-Token", sb.EnvdAccessToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	switch resp.StatusCode {
	case http.StatusOK:
		return string(b), true
	case http.StatusNotFound:
		return "", false
	}
	t.Fatalf("read %s: %s: %s", path, resp.Status, b)
	return "", false
}

// TestTemplateCommands runs `warren template build|list|delete` against a
// real `warren serve` (runsc): a Dockerfile with every step type builds,
// a sandbox of it has the files, users and environment the steps made, a
// rebuild hits the caches, a failing RUN fails the command with the step,
// its output and exit code, delete removes the template.
func TestTemplateCommands(t *testing.T) {
	const key = "e2b_00112233445566778899aabbccddeeff00112233"
	apiURL := serveRunsc(t, key)
	common := []string{"--api-url", apiURL, "--api-key", key}
	ctxDir := filepath.Join(t.TempDir(), "MyApp")
	writeFiles(t, ctxDir, map[string]string{
		"hello.txt": "hello\n", "sub/deep.txt": "deep\n", "sub/skip.log": "ignored\n", ".dockerignore": "sub/*.log\n",
		"mytool": "#!/bin/sh\necho tool-ran\n",
		// PATH extends the base template's (the server expands it), the
		// WORKDIR and a COPY destination come from ENV.
		"Dockerfile": `FROM base
ARG WHO=world
ENV GREETING=hi APPDIR=/opt/app
ENV PATH=/opt/tools:$PATH
WORKDIR $APPDIR
COPY hello.txt ./
COPY sub $APPDIR/sub/
COPY --chmod=0755 mytool /opt/tools/
RUN echo "$GREETING $WHO" > greeting.txt && id -un > builder.txt && mytool > tool.txt
USER user
RUN whoami > /home/user/who.txt && echo step-output-line
CMD ["/bin/sh", "-c", "tr '\\0' '\\n' < /proc/$$/environ > /home/user/start-environ.txt; env > /home/user/start-env.txt; exec sleep infinity"]
`,
		"Dockerfile.fail": "FROM base\nRUN echo failing-output; echo to-stderr >&2; exit 4\n",
		"Dockerfile.bad":  "FROM base\nHEALTHCHECK CMD true\n",
	})
	build := func(t *testing.T, extra ...string) (string, error) {
		t.Helper()
		args := append([]string{"build", "--build-arg", "WHO=warren", "--ready-cmd", "test -s /home/user/start-env.txt"}, common...)
		return runTemplate(t, append(args, append(extra, ctxDir)...)...)
	}

	out, err := build(t)
	t.Logf("warren template build:\n%s", out)
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	for _, want := range []string{"myapp", "FROM template base, 10 steps", "uploaded 1 files", "uploaded 2 files", "[10/10]", "step-output-line", "template myapp ready"} {
		if !strings.Contains(out, want) {
			t.Errorf("build output lacks %q", want)
		}
	}
	if regexp.MustCompile(`CACHED`).MatchString(out) {
		t.Errorf("first build took steps from the cache")
	}

	out, err = runTemplate(t, append([]string{"list"}, common...)...)
	if err != nil || !regexp.MustCompile(`(?m)^\S+\s+myapp\s+false\s+\d+\s+\d+ MiB\s+1\s+ready`).MatchString(out) {
		t.Fatalf("list: %v\n%s", err, out)
	}

	c := client.New(apiURL, key)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	sb, err := c.Create(ctx, client.NewSandbox{TemplateID: "myapp"})
	if err != nil {
		t.Fatalf("create a sandbox of myapp: %v", err)
	}
	for path, want := range map[string]string{
		"/opt/app/greeting.txt": "hi warren\n", // ARG (build arg), ENV, WORKDIR, RUN
		"/opt/app/builder.txt":  "root\n",      // RUN before USER
		"/opt/app/tool.txt":     "tool-ran\n",  // RUN with the extended PATH
		"/home/user/who.txt":    "user\n",      // RUN after USER user
		"/opt/app/hello.txt":    "hello\n",     // COPY to the WORKDIR
		"/opt/app/sub/deep.txt": "deep\n",      // COPY of a directory
	} {
		if got, ok := readSandboxFile(t, apiURL, sb, path); got != want {
			t.Errorf("%s = %q (exists %v), want %q", path, got, ok, want)
		}
	}
	if _, ok := readSandboxFile(t, apiURL, sb, "/opt/app/sub/skip.log"); ok {
		t.Errorf("a file of .dockerignore reached the template")
	}
	env, _ := readSandboxFile(t, apiURL, sb, "/home/user/start-env.txt")
	for _, want := range []string{"GREETING=hi", "APPDIR=/opt/app"} {
		if !strings.Contains(env, want) {
			t.Errorf("the start command's environment lacks %s:\n%s", want, env)
		}
	}
	// The environment the sandbox gave the start command (its bash -l
	// then reads the image's /etc/profile, which on Debian sets PATH anew):
	// the template's PATH is the base template's, extended by the ENV step.
	environ, _ := readSandboxFile(t, apiURL, sb, "/home/user/start-environ.txt")
	if want := "\nPATH=/opt/tools:" + templates.DefaultPath + "\n"; !strings.Contains("\n"+environ, want) {
		t.Errorf("the start command was not given PATH=/opt/tools:%s:\n%s", templates.DefaultPath, environ)
	}
	if _, err := c.Kill(ctx, sb.SandboxID); err != nil {
		t.Error(err)
	}

	t.Run("rebuild", func(t *testing.T) {
		out, err := build(t)
		if err != nil {
			t.Fatalf("rebuild: %v\n%s", err, out)
		}
		for _, want := range []string{"files already on the server", "CACHED", "template myapp ready"} {
			if !strings.Contains(out, want) {
				t.Errorf("rebuild output lacks %q:\n%s", want, out)
			}
		}
		out, err = build(t, "--no-cache")
		if err != nil || strings.Contains(out, "CACHED") {
			t.Errorf("--no-cache: %v\n%s", err, out)
		}
	})

	t.Run("failing RUN", func(t *testing.T) {
		out, err := runTemplate(t, append(append([]string{"build", "--name", "failing", "-f", filepath.Join(ctxDir, "Dockerfile.fail")}, common...), ctxDir)...)
		if err == nil {
			t.Fatalf("a failing RUN built:\n%s", out)
		}
		for _, want := range []string{"step 1", "exit code 4", "failing-output", "to-stderr"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q lacks %q", err, want)
			}
		}
		if !regexp.MustCompile(`(?m)\[1/1\]\s+failing-output$`).MatchString(out) {
			t.Errorf("the step's output was not streamed:\n%s", out)
		}
	})

	t.Run("unsupported instruction", func(t *testing.T) {
		_, err := runTemplate(t, append(append([]string{"build", "--name", "bad", "-f", filepath.Join(ctxDir, "Dockerfile.bad")}, common...), ctxDir)...)
		if err == nil || !strings.Contains(err.Error(), "HEALTHCHECK is not supported") {
			t.Errorf("unsupported instruction: %v", err)
		}
	})

	t.Run("delete", func(t *testing.T) {
		if out, err := runTemplate(t, append([]string{"delete", "myapp", "failing"}, common...)...); err != nil || !strings.Contains(out, "deleted myapp") {
			t.Fatalf("delete: %v\n%s", err, out)
		}
		if out, _ := runTemplate(t, append([]string{"list"}, common...)...); strings.Contains(out, "myapp") || strings.Contains(out, "failing") {
			t.Errorf("list after delete:\n%s", out)
		}
		_, err := runTemplate(t, append([]string{"delete", "myapp"}, common...)...)
		if err == nil || !strings.Contains(err.Error(), "not found") {
			t.Errorf("delete of a deleted template: %v", err)
		}
		if _, err := c.Create(ctx, client.NewSandbox{TemplateID: "myapp"}); !client.IsNotFound(err) {
			t.Errorf("create from a deleted template: %v", err)
		}
	})
}
