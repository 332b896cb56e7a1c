package mcpgateway

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

// Pull installs the catalog's servers names into l, as
// Template().addMcpServer does at build time (`mcp-gateway pull NAME...`,
// as root). Every name is checked before anything is installed: a name
// the catalog lacks fails the pull, naming it. A remote server has
// nothing to install; one installed already is left as it is.
func Pull(ctx context.Context, l Layout, names []string, out io.Writer) error {
	if len(names) == 0 {
		return errors.New("pull: name at least one catalog server (mcp-gateway catalog lists them)")
	}
	var entries []*Entry
	var errs []error
	for _, n := range names {
		e, ok := Lookup(n)
		if !ok {
			if strings.HasPrefix(n, "github/") {
				errs = append(errs, &ServerError{Server: n, Err: errors.New("a repository server is cloned at start from its config; pull takes catalog names")})
			} else {
				errs = append(errs, &ServerError{Server: n, Err: unknownServer(n)})
			}
			continue
		}
		entries = append(entries, e)
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	for _, e := range entries {
		if e.Remote() {
			fmt.Fprintf(out, "%s: a remote server (%s), nothing to install\n", e.Name, e.URL)
			continue
		}
		if err := install(ctx, l, e, false, out); err != nil {
			return &ServerError{Server: e.Name, Err: err}
		}
	}
	return nil
}

// PrepareImage fills l.Root for the template's root filesystem: every npm
// server of the catalog is installed from npm's cache and the registry,
// all at once, which fills the cache with its whole pinned tree; then
// those not Preinstalled are removed again, their packages staying in the
// cache for an offline pull. A server installed already (a tree the
// caller kept from an earlier run) is left as it is, and one whose tree
// the cache holds already (a marker in the cache says so) is not
// installed again.
func PrepareImage(ctx context.Context, l Layout, out io.Writer) error {
	var mu sync.Mutex
	var wg sync.WaitGroup
	var errs []error
	for _, e := range Catalog() {
		if e.Remote() {
			continue
		}
		wg.Go(func() {
			var buf bytes.Buffer
			err := prepareEntry(ctx, l, e, &buf)
			mu.Lock()
			defer mu.Unlock()
			_, _ = out.Write(buf.Bytes())
			if err != nil {
				errs = append(errs, &ServerError{Server: e.Name, Err: err})
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

func prepareEntry(ctx context.Context, l Layout, e *Entry, out io.Writer) error {
	_, lock, err := e.pinFiles()
	if err != nil {
		return err
	}
	sum := sha256.Sum256(lock)
	marker := filepath.Join(l.npmCache(), ".warren-pinned", e.Name)
	if b, err := os.ReadFile(marker); err == nil && string(b) == hex.EncodeToString(sum[:]) && !e.Preinstalled {
		fmt.Fprintf(out, "%s: in the npm cache already (installed by pull or at start)\n", e.Name)
		return nil
	}
	if err := install(ctx, l, e, true, out); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(marker), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(marker, []byte(hex.EncodeToString(sum[:])), 0o644); err != nil {
		return err
	}
	if !e.Preinstalled {
		fmt.Fprintf(out, "%s: in the npm cache only (installed by pull or at start)\n", e.Name)
		return os.RemoveAll(l.serverDir(e.Name))
	}
	return nil
}

// installed reports whether e is installed in l with the lockfile the
// catalog pins.
func installed(l Layout, e *Entry) bool {
	_, lock, err := e.pinFiles()
	if err != nil {
		return false
	}
	have, err := os.ReadFile(filepath.Join(l.serverDir(e.Name), "package-lock.json"))
	if err != nil || !bytes.Equal(have, lock) {
		return false
	}
	_, err = os.Stat(l.serverBin(e))
	return err == nil
}

func (l Layout) serverBin(e *Entry) string {
	return filepath.Join(l.serverDir(e.Name), "node_modules", ".bin", e.Bin)
}

// install installs e into l.serverDir with `npm ci --offline` of its
// pinned lockfile, from npm's cache in l (which the template's root
// filesystem holds) or, online (when the root filesystem is made), from
// that cache and the registry for what it lacks; without install scripts. The tree is made beside and renamed into place.
func install(ctx context.Context, l Layout, e *Entry, online bool, out io.Writer) error {
	version, err := e.Version()
	if err != nil {
		return err
	}
	if installed(l, e) {
		fmt.Fprintf(out, "%s: %s %s already installed\n", e.Name, e.Package, version)
		return nil
	}
	pkg, lock, err := e.pinFiles()
	if err != nil {
		return err
	}
	dir := l.serverDir(e.Name)
	tmp := dir + ".pull"
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if err := os.WriteFile(filepath.Join(tmp, "package.json"), pkg, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(tmp, "package-lock.json"), lock, 0o644); err != nil {
		return err
	}
	mode := "--offline"
	if online {
		mode = "--prefer-offline"
	}
	cmd := exec.CommandContext(ctx, l.NPM, "ci", mode, "--cache", l.npmCache(),
		"--omit=dev", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error", "--update-notifier=false")
	cmd.Dir = tmp
	cmd.Env = append(baseEnv(), "npm_config_engine_strict=false")
	if tail, err := runCapture(cmd); err != nil {
		return fmt.Errorf("npm ci of %s %s: %w%s", e.Package, version, err, tail)
	}
	if _, err := os.Stat(filepath.Join(tmp, "node_modules", ".bin", e.Bin)); err != nil {
		return fmt.Errorf("npm ci of %s %s installed no %s", e.Package, version, e.Bin)
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.Rename(tmp, dir); err != nil {
		return err
	}
	fmt.Fprintf(out, "%s: %s %s installed\n", e.Name, e.Package, version)
	return nil
}

// prepareGitHub makes s's repository ready in l: cloned (once) from
// l.GitHubURL, then s's installCmd run by bash in its root. It returns the
// repository's directory. Output that explains a failure is redacted.
func prepareGitHub(ctx context.Context, l Layout, s *Server, redact func(string) string) (string, error) {
	g := s.GitHub
	dir := l.repoDir(g)
	if _, err := os.Stat(filepath.Join(dir, ".git")); err != nil {
		tmp := dir + ".clone"
		if err := os.RemoveAll(tmp); err != nil {
			return "", err
		}
		if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
			return "", err
		}
		url := strings.TrimSuffix(l.GitHubURL, "/") + "/" + g.Owner + "/" + g.Repo
		cmd := exec.CommandContext(ctx, l.Git, "clone", "--depth", "1", "--quiet", "--", url, tmp)
		cmd.Env = append(baseEnv(), "GIT_TERMINAL_PROMPT=0")
		if tail, err := runCapture(cmd); err != nil {
			os.RemoveAll(tmp)
			return "", fmt.Errorf("git clone %s: %w%s", url, err, redact(tail))
		}
		if err := os.Rename(tmp, dir); err != nil {
			return "", err
		}
	}
	if g.InstallCmd != "" {
		cmd := exec.CommandContext(ctx, l.Shell, "-c", g.InstallCmd)
		cmd.Dir = dir
		cmd.Env = append(baseEnv(), s.Env...)
		if tail, err := runCapture(cmd); err != nil {
			return "", fmt.Errorf("installCmd: %w%s", err, redact(tail))
		}
	}
	return dir, nil
}

// maxTail bounds the output a failure quotes.
const maxTail = 2000

// runCapture runs cmd and returns, on failure, the end of its output as
// ": <output>" (empty when there was none).
func runCapture(cmd *exec.Cmd) (string, error) {
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	err := cmd.Run()
	if err == nil {
		return "", nil
	}
	s := strings.TrimSpace(buf.String())
	if len(s) > maxTail {
		s = "..." + s[len(s)-maxTail:]
	}
	if s != "" {
		s = ": " + s
	}
	return s, err
}

// baseEnv is the environment of the gateway's children: the gateway's
// own, less the token.
func baseEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, TokenEnv+"=") {
			out = append(out, kv)
		}
	}
	return out
}
