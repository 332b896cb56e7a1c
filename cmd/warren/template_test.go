package main

import (
	"archive/tar"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// shellRootFS writes a tar of a minimal root filesystem (the host's dash as
// /bin/sh with its libraries) to path.
func shellRootFS(t *testing.T, path string) {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(name string, body []byte) {
		tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(body))})
		tw.Write(body)
	}
	files := map[string]string{"bin/sh": "/usr/bin/dash"}
	out, err := exec.Command("ldd", "/usr/bin/dash").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range regexp.MustCompile(`(/\S+\.so[.\d]*)`).FindAllString(string(out), -1) {
		files[strings.TrimPrefix(l, "/")] = l
	}
	for dst, src := range files {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		add(dst, b)
	}
	add("etc/passwd", []byte("root:x:0:0:root:/root:/bin/sh\n"))
	add("etc/group", []byte("root:x:0:\n"))
	tw.WriteHeader(&tar.Header{Name: "tmp/", Typeflag: tar.TypeDir, Mode: 0o1777})
	tw.Close()
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

func runTemplate(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	cmd := templateCommand()
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), err
}

func TestTemplateCommand(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("template builds need root (CI=true)")
		}
		t.Skip("template builds need root")
	}
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	base := filepath.Join(dir, "base.tar")
	shellRootFS(t, base)
	ctxDir := filepath.Join(dir, "myapp")
	os.MkdirAll(ctxDir, 0o755)
	os.WriteFile(filepath.Join(ctxDir, "hello.txt"), []byte("hello\n"), 0o644)
	os.WriteFile(filepath.Join(ctxDir, "Dockerfile"), []byte("FROM e2bdev/base\nARG WHO=world\nENV GREETING=hi\nCOPY hello.txt /app/\nRUN echo \"$GREETING $WHO\" > /app/greeting.txt\nCMD [\"/bin/sh\"]\n"), 0o644)
	common := []string{"--data-dir", data, "--base-rootfs", base, "--team", "t1"}

	out, err := runTemplate(t, append([]string{"build", "--runner", "chroot", "--build-arg", "WHO=warren", ctxDir}, common...)...)
	if err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	for _, want := range []string{"base: base template ready", "[4/4]", "template myapp ready"} {
		if !strings.Contains(out, want) {
			t.Errorf("build output lacks %q:\n%s", want, out)
		}
	}
	matches, _ := filepath.Glob(filepath.Join(data, "templates", "builds", "*", "rootfs", "app", "greeting.txt"))
	if len(matches) != 1 {
		t.Fatalf("greeting.txt in %d builds", len(matches))
	}
	if b, _ := os.ReadFile(matches[0]); string(b) != "hi warren\n" {
		t.Errorf("RUN wrote %q", b)
	}

	out, err = runTemplate(t, append([]string{"build", "--runner", "chroot", "--name", "broken", "-f", filepath.Join(ctxDir, "Dockerfile.bad"), ctxDir}, common...)...)
	if err == nil {
		t.Errorf("build of a missing Dockerfile succeeded:\n%s", out)
	}
	os.WriteFile(filepath.Join(ctxDir, "Dockerfile.bad"), []byte("FROM e2bdev/base\nHEALTHCHECK CMD true\n"), 0o644)
	if _, err := runTemplate(t, append([]string{"build", "--name", "broken", "-f", filepath.Join(ctxDir, "Dockerfile.bad"), ctxDir}, common...)...); err == nil || !strings.Contains(err.Error(), "HEALTHCHECK is not supported") {
		t.Errorf("unsupported instruction: %v", err)
	}
	os.WriteFile(filepath.Join(ctxDir, "Dockerfile.fail"), []byte("FROM e2bdev/base\nRUN echo failing; exit 4\n"), 0o644)
	out, err = runTemplate(t, append([]string{"build", "--runner", "chroot", "--name", "failing", "-f", filepath.Join(ctxDir, "Dockerfile.fail"), ctxDir}, common...)...)
	if err == nil || !strings.Contains(err.Error(), "exit code 4") || !strings.Contains(out, "failing") {
		t.Errorf("failing RUN: %v\n%s", err, out)
	}

	out, err = runTemplate(t, append([]string{"list"}, common...)...)
	if err != nil || !strings.Contains(out, "myapp") || strings.Contains(out, " base ") {
		t.Errorf("list: %v\n%s", err, out)
	}
	if out, err = runTemplate(t, append([]string{"list", "--all"}, common...)...); err != nil || !strings.Contains(out, "base") {
		t.Errorf("list --all: %v\n%s", err, out)
	}
	if out, err = runTemplate(t, append([]string{"delete", "myapp"}, common...)...); err != nil {
		t.Fatalf("delete: %v\n%s", err, out)
	}
	if out, _ = runTemplate(t, append([]string{"list"}, common...)...); strings.Contains(out, "myapp") {
		t.Errorf("after delete:\n%s", out)
	}
}
