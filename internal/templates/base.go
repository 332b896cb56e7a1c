package templates

import (
	"bufio"
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
	"time"

	"github.com/warren-sandbox/warren/internal/atomicfile"
	"github.com/warren-sandbox/warren/internal/errdefs"
)

// BasePackages are the Debian packages of the base template, beyond
// mmdebstrap's minbase variant. scripts/build-base-rootfs.sh installs the
// same list (a test checks it).
var BasePackages = []string{
	"bash", "python3", "python-is-python3", "python3-pip", "python3-venv", "git", "curl", "sudo",
	"ca-certificates", "procps", "iproute2", "less", "nano",
}

// BaseSuite is the Debian release of the base template.
const BaseSuite = "bookworm"

// Progress reports how far EnsureBase got.
type Progress struct {
	// Phase is "check", "hash" (the tar's SHA-256 is computed), "bootstrap"
	// (mmdebstrap runs), "unpack" or "ready".
	Phase string
	// Message is a human-readable line (mmdebstrap's output while
	// bootstrapping).
	Message string
	// Done and Total count bytes while hashing and unpacking; Total is 0
	// when unknown.
	Done, Total int64
}

// EnsureBase makes sure the default `base` template exists with a ready
// build whose root filesystem is unpacked on this machine. On first start
// it builds the root filesystem from Debian's packages with mmdebstrap (or
// takes Config.BaseRootFSTar when that file exists); later calls reuse it
// as long as the tar it came from is the same (its size and modification
// time, else its SHA-256, against the fingerprint recorded in the build).
// When the tar changed (`make base-rootfs` made a new one), EnsureBase
// makes a new base build from it and moves the default tag there; the old
// build and its tree stay for what was made from it (see RebuildBase).
// progress, when set, is called as work advances.
func (c *Catalog) EnsureBase(ctx context.Context, progress func(Progress)) error {
	return c.ensureBase(ctx, progress, false)
}

// RebuildBase makes a new base build whatever the state of the current
// one: from Config.BaseRootFSTar when that file exists, else from a new
// mmdebstrap run (fresh Debian packages). The default tag moves to the new
// build. The old build stays ready with its tree: templates built from it
// have trees of their own, but sandbox snapshots and running or paused
// sandboxes of the base template use the old tree as their lower layer.
func (c *Catalog) RebuildBase(ctx context.Context, progress func(Progress)) error {
	return c.ensureBase(ctx, progress, true)
}

// rebuildRequest is the file (in DataDir/base) by which RequestBaseRebuild
// asks the next EnsureBase for a new base build.
const rebuildRequest = "rebuild-requested"

// RequestBaseRebuild asks the next EnsureBase on the catalog in dataDir
// (Config.DataDir) to act as RebuildBase (`warren serve --rebuild-base`).
// The request stays until a new base build is ready.
func RequestBaseRebuild(dataDir string) error {
	dir := filepath.Join(dataDir, "base")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("base template rebuild request: %w", err)
	}
	if err := atomicfile.Write(filepath.Join(dir, rebuildRequest), []byte("requested "+time.Now().UTC().Format(time.RFC3339)+"\n"), 0o600); err != nil {
		return fmt.Errorf("base template rebuild request: %w", err)
	}
	return nil
}

func (c *Catalog) ensureBase(ctx context.Context, progress func(Progress), force bool) (err error) {
	if progress == nil {
		progress = func(Progress) {}
	}
	c.baseMu.Lock()
	defer c.baseMu.Unlock()
	progress(Progress{Phase: "check", Message: "looking for the base template"})
	request := filepath.Join(c.cfg.DataDir, "base", rebuildRequest)
	if fileExists(request) {
		force = true
		progress(Progress{Phase: "check", Message: "a rebuild of the base template was asked for"})
		defer func() {
			// A failed rebuild is reported once: the next start without
			// the request goes on with the current build.
			if err != nil && ctx.Err() == nil {
				os.Remove(request)
				err = fmt.Errorf("%w (the rebuild request is dropped; the next start keeps the current base build)", err)
			}
		}()
	}

	// The tar: the configured one when present (the operator's choice),
	// else the one an earlier mmdebstrap run left, unless forced.
	tarPath, configured := c.cfg.BaseRootFSTar, true
	if tarPath == "" || !fileExists(tarPath) {
		tarPath, configured = filepath.Join(c.cfg.DataDir, "base", "rootfs.tar"), false
		if force || !fileExists(tarPath) {
			tarPath = ""
		}
	}
	cur, err := c.currentBase(ctx)
	if err != nil {
		return fmt.Errorf("base template: %w", err)
	}
	switch {
	case cur == nil:
	case force:
		c.log.Info("base template rebuild asked for", "build_id", cur.ID)
	case tarPath == "" || (!configured && cur.RootFSTar != tarPath):
		// Nothing to compare with: the build's own tar is gone (and no
		// configured one replaces it).
		progress(Progress{Phase: "ready", Message: "base template ready (build " + cur.ID + ")"})
		return nil
	default:
		changed, err := c.baseTarChanged(ctx, cur, tarPath, progress)
		if err != nil {
			return fmt.Errorf("base template: %w", err)
		}
		if !changed {
			progress(Progress{Phase: "ready", Message: "base template ready (build " + cur.ID + ")"})
			return nil
		}
		c.log.Info("base root filesystem tar changed, making a new base build", "old_build_id", cur.ID, "tar", tarPath)
		progress(Progress{Phase: "check", Message: tarPath + " changed since build " + cur.ID + ": making a new base build"})
	}

	if tarPath == "" {
		tarPath = filepath.Join(c.cfg.DataDir, "base", "rootfs.tar")
		if err := c.bootstrapBase(ctx, tarPath, progress); err != nil {
			return fmt.Errorf("base template: %w", err)
		}
	}

	now := c.now()
	if _, err := c.store.GetTemplate(ctx, BaseID); errdefs.IsNotFound(err) {
		t := &Template{
			ID: BaseID, Aliases: []string{BaseID}, Public: true, Tags: map[string]Tag{},
			CPUCount: DefaultCPU, MemoryMB: DefaultMemoryMB, DiskMB: DefaultDiskMB,
			CreatedAt: now, UpdatedAt: now,
		}
		if err := c.store.CreateTemplate(ctx, t); err != nil {
			return fmt.Errorf("base template: %w", err)
		}
	} else if err != nil {
		return fmt.Errorf("base template: %w", err)
	}
	b := &Build{
		ID: NewBuildID(), TemplateID: BaseID, Status: BuildBuilding, Tags: []string{DefaultTag},
		RootFSTar: tarPath, Env: map[string]string{"PATH": DefaultPath},
		User: DefaultUser, Workdir: DefaultWorkdir,
		CPUCount: DefaultCPU, MemoryMB: DefaultMemoryMB, DiskMB: DefaultDiskMB,
		CreatedAt: now, UpdatedAt: now,
	}
	b.RootFSDir = filepath.Join(c.BuildDir(b.ID), "rootfs")
	if err := c.store.CreateBuild(ctx, b); err != nil {
		return fmt.Errorf("base template: %w", err)
	}
	progress(Progress{Phase: "unpack", Message: "unpacking " + tarPath})
	fp, err := c.unpackTar(ctx, tarPath, b.RootFSDir, nil, func(done, total int64) {
		progress(Progress{Phase: "unpack", Done: done, Total: total})
	})
	if err == nil {
		_, err = c.UpdateBuild(ctx, b.ID, func(x *Build) error { x.RootFSTarFingerprint = fp; return nil })
	}
	if err != nil {
		if _, ferr := c.FinishBuild(context.WithoutCancel(ctx), b.ID, &Reason{Message: err.Error(), Step: "unpack"}); ferr != nil {
			c.log.Warn("record failed base build", "build_id", b.ID, "error", ferr)
		}
		return fmt.Errorf("base template: %w", err)
	}
	if _, err := c.FinishBuild(ctx, b.ID, nil); err != nil {
		return fmt.Errorf("base template: %w", err)
	}
	if force {
		if err := os.Remove(request); err != nil && !errors.Is(err, os.ErrNotExist) {
			c.log.Warn("remove base rebuild request", "path", request, "error", err)
		}
	}
	c.log.Info("base template ready", "template_id", BaseID, "build_id", b.ID, "rootfs", b.RootFSDir, "tar", tarPath, "sha256", fp.SHA256)
	progress(Progress{Phase: "ready", Message: "base template ready (build " + b.ID + ")"})
	return nil
}

// currentBase returns the ready build behind the base template's default
// tag when its root filesystem is usable here, or nil.
func (c *Catalog) currentBase(ctx context.Context) (*Build, error) {
	return c.currentSystem(ctx, BaseID)
}

// currentSystem returns the ready build behind the default tag of the
// system template id when its root filesystem is usable here, or nil.
func (c *Catalog) currentSystem(ctx context.Context, id string) (*Build, error) {
	t, err := c.store.GetTemplate(ctx, id)
	if errdefs.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	tg, ok := t.Tags[DefaultTag]
	if !ok {
		return nil, nil
	}
	b, err := c.store.GetBuild(ctx, tg.BuildID)
	if err != nil || b.Status != BuildReady {
		return nil, nil
	}
	if _, err := c.ensureRootFS(ctx, b); err != nil {
		c.log.Warn("system template build unusable, making a new one", "template_id", id, "build_id", b.ID, "error", err)
		return nil, nil
	}
	return b, nil
}

// baseTarChanged tells whether tarPath differs from the tar that build b
// was made from. Same size and modification time mean the same tar;
// otherwise its SHA-256 decides, and an unchanged tar's new size, time or
// path is recorded. A build made before fingerprints were recorded counts
// as changed when the tar is newer than the build.
func (c *Catalog) baseTarChanged(ctx context.Context, b *Build, tarPath string, progress func(Progress)) (bool, error) {
	fi, err := os.Stat(tarPath)
	if err != nil {
		return false, fmt.Errorf("root filesystem tar: %w", err)
	}
	old := b.RootFSTarFingerprint
	if old != nil && old.Size == fi.Size() && old.ModTime.Equal(fi.ModTime()) && b.RootFSTar == tarPath {
		return false, nil
	}
	if old == nil && fi.ModTime().After(b.CreatedAt) {
		return true, nil
	}
	progress(Progress{Phase: "hash", Message: fmt.Sprintf("checking %s (%d MB, sha256)", tarPath, fi.Size()>>20), Total: fi.Size()})
	fp, err := fingerprintFile(ctx, tarPath, func(done, total int64) {
		progress(Progress{Phase: "hash", Done: done, Total: total})
	})
	if err != nil {
		return false, err
	}
	if old != nil && old.SHA256 != fp.SHA256 {
		return true, nil
	}
	// Same content (or a build from before fingerprints, older than its
	// tar): record what the tar looks like now.
	_, err = c.store.UpdateBuild(ctx, b.ID, func(x *Build) error {
		x.RootFSTarFingerprint, x.RootFSTar = fp, tarPath
		return nil
	})
	if err != nil {
		return false, err
	}
	c.log.Info("base root filesystem tar unchanged, fingerprint recorded", "build_id", b.ID, "tar", tarPath, "sha256", fp.SHA256)
	return false, nil
}

// TarFingerprint identifies the content of a root filesystem tar: size
// and modification time notice a change cheaply, SHA-256 decides.
type TarFingerprint struct {
	Size    int64     `json:"size"`
	ModTime time.Time `json:"modTime"`
	SHA256  string    `json:"sha256"`
}

// fingerprintFile hashes the file at p, reporting progress every 8 MiB.
func fingerprintFile(ctx context.Context, p string, progress func(done, total int64)) (*TarFingerprint, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, fmt.Errorf("root filesystem tar: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("root filesystem tar: %w", err)
	}
	h := sha256.New()
	r := &countingReader{r: f, ctx: ctx, total: fi.Size(), progress: progress}
	if _, err := io.Copy(h, r); err != nil {
		return nil, fmt.Errorf("root filesystem tar %s: %w", p, err)
	}
	return &TarFingerprint{Size: fi.Size(), ModTime: fi.ModTime(), SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

// countingReader reports how much was read, every 8 MiB, and stops when
// ctx ends.
type countingReader struct {
	r        io.Reader
	ctx      context.Context
	done     int64
	last     int64
	total    int64
	progress func(done, total int64)
}

func (c *countingReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	n, err := c.r.Read(p)
	c.done += int64(n)
	if c.progress != nil && (c.done-c.last >= 8<<20 || (err == io.EOF && c.done != c.last)) {
		c.last = c.done
		c.progress(c.done, c.total)
	}
	return n, err
}

// MmdebstrapArgs is the mmdebstrap command line (after the program name)
// that writes the base root filesystem to out.
func MmdebstrapArgs(out, mirror string) []string {
	args := []string{"--format=tar", "--variant=minbase", "--include=" + strings.Join(BasePackages, ",")}
	for _, h := range BaseHooks {
		args = append(args, "--customize-hook="+h)
	}
	return append(args, BaseSuite, out, mirror)
}

// BaseHooks are mmdebstrap's customize hooks of the base root filesystem
// ($1 is its root), the same in scripts/build-base-rootfs.sh (a test
// checks it): the user `user` with passwordless sudo, no hostname or
// resolver of the build machine, and an /etc/profile that keeps the PATH
// a login shell was started with, so that a template's ENV PATH reaches
// `bash -l` processes (the SDK's commands, start and ready commands;
// docs/lifecycle.md §7) instead of Debian's fixed default.
var BaseHooks = []string{
	`chroot "$1" useradd --create-home --shell /bin/bash --uid 1000 user`,
	`echo "user ALL=(ALL:ALL) NOPASSWD: ALL" > "$1/etc/sudoers.d/user" && chmod 0440 "$1/etc/sudoers.d/user"`,
	`rm -f "$1/etc/hostname" "$1/etc/resolv.conf"; : > "$1/etc/resolv.conf"`,
	`sed -i -e "1i # Warren: a login shell keeps the PATH it was started with (the ENV PATH of a template) unless it has relative entries.\nwarren_path=\${PATH-}\ncase \":\$warren_path:\" in *:.:*|*::*) warren_path= ;; esac" -e "0,/^export PATH\$/s//if [ -n \"\$warren_path\" ]; then PATH=\$warren_path; fi; unset warren_path\nexport PATH/" "$1/etc/profile"`,
}

// bootstrapBase runs mmdebstrap into out, streaming its output as progress.
func (c *Catalog) bootstrapBase(ctx context.Context, out string, progress func(Progress)) error {
	bin, err := exec.LookPath(c.cfg.Mmdebstrap)
	if err != nil {
		return fmt.Errorf("mmdebstrap is needed to build the base template from Debian's packages (apt-get install mmdebstrap): %w", errdefs.ErrUnavailable)
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	tmp := out + ".tmp"
	os.Remove(tmp)
	defer os.Remove(tmp)
	progress(Progress{Phase: "bootstrap", Message: "building the base root filesystem from Debian " + BaseSuite + " packages (about a minute)"})
	cmd := exec.CommandContext(ctx, bin, MmdebstrapArgs(tmp, c.cfg.DebianMirror)...)
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	var tail lastLines
	var wg sync.WaitGroup
	wg.Go(func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			line := sc.Text()
			tail.add(line)
			progress(Progress{Phase: "bootstrap", Message: line})
		}
		io.Copy(io.Discard, pr)
	})
	c.log.Info("building base root filesystem", "mmdebstrap", bin, "out", out)
	runErr := cmd.Run()
	pw.Close()
	wg.Wait()
	if runErr != nil {
		var ee *exec.ExitError
		if errors.As(runErr, &ee) {
			return fmt.Errorf("mmdebstrap failed (exit %d): %s: %w", ee.ExitCode(), tail.String(), errdefs.ErrUnavailable)
		}
		return fmt.Errorf("mmdebstrap: %w", runErr)
	}
	if err := os.Rename(tmp, out); err != nil {
		return err
	}
	return nil
}

// lastLines keeps the last few lines of a command's output for its error.
type lastLines struct{ lines []string }

func (l *lastLines) add(s string) {
	l.lines = append(l.lines, s)
	if len(l.lines) > 5 {
		l.lines = l.lines[1:]
	}
}

func (l *lastLines) String() string { return strings.Join(l.lines, " | ") }

func fileExists(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

// PrintProgress returns a progress function for EnsureBase and RebuildBase
// that writes lines to out, each starting with prefix: every message, and
// while hashing or unpacking the percentage done, once per tenth.
func PrintProgress(out io.Writer, prefix string) func(Progress) {
	phase, tenth := "", int64(-1)
	return func(p Progress) {
		if p.Phase != phase {
			phase, tenth = p.Phase, -1
		}
		if p.Message != "" {
			fmt.Fprintf(out, "%s%s\n", prefix, p.Message)
			return
		}
		if p.Total <= 0 {
			return
		}
		verb := map[string]string{"hash": "checking", "unpack": "unpacking"}[p.Phase]
		if t := p.Done * 10 / p.Total; verb != "" && t != tenth {
			tenth = t
			fmt.Fprintf(out, "%s%s %d%%\n", prefix, verb, t*10)
		}
	}
}
