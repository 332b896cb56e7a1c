package templates

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

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
	// Phase is "check", "bootstrap" (mmdebstrap runs), "unpack" or "ready".
	Phase string
	// Message is a human-readable line (mmdebstrap's output while
	// bootstrapping).
	Message string
	// Done and Total count bytes while unpacking; Total is 0 when unknown.
	Done, Total int64
}

// EnsureBase makes sure the default `base` template exists with a ready
// build whose root filesystem is unpacked on this machine. On first start
// it builds the root filesystem from Debian's packages with mmdebstrap (or
// takes Config.BaseRootFSTar when that file exists); later calls reuse it.
// progress, when set, is called as work advances.
func (c *Catalog) EnsureBase(ctx context.Context, progress func(Progress)) error {
	if progress == nil {
		progress = func(Progress) {}
	}
	c.baseMu.Lock()
	defer c.baseMu.Unlock()
	progress(Progress{Phase: "check", Message: "looking for the base template"})

	if t, err := c.store.GetTemplate(ctx, BaseID); err == nil {
		if tg, ok := t.Tags[DefaultTag]; ok {
			b, err := c.store.GetBuild(ctx, tg.BuildID)
			if err == nil && b.Status == BuildReady {
				if _, err := c.ensureRootFS(ctx, b); err == nil {
					progress(Progress{Phase: "ready", Message: "base template ready (build " + b.ID + ")"})
					return nil
				}
				c.log.Warn("base template build unusable, rebuilding", "build_id", b.ID)
			}
		}
	} else if !errdefs.IsNotFound(err) {
		return fmt.Errorf("base template: %w", err)
	}

	tarPath := c.cfg.BaseRootFSTar
	if tarPath == "" || !fileExists(tarPath) {
		tarPath = filepath.Join(c.cfg.DataDir, "base", "rootfs.tar")
		if !fileExists(tarPath) {
			if err := c.bootstrapBase(ctx, tarPath, progress); err != nil {
				return fmt.Errorf("base template: %w", err)
			}
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
	err := c.unpackTar(ctx, tarPath, b.RootFSDir, func(done, total int64) {
		progress(Progress{Phase: "unpack", Done: done, Total: total})
	})
	if err != nil {
		if _, ferr := c.FinishBuild(context.WithoutCancel(ctx), b.ID, &Reason{Message: err.Error(), Step: "unpack"}); ferr != nil {
			c.log.Warn("record failed base build", "build_id", b.ID, "error", ferr)
		}
		return fmt.Errorf("base template: %w", err)
	}
	if _, err := c.FinishBuild(ctx, b.ID, nil); err != nil {
		return fmt.Errorf("base template: %w", err)
	}
	c.log.Info("base template ready", "template_id", BaseID, "build_id", b.ID, "rootfs", b.RootFSDir)
	progress(Progress{Phase: "ready", Message: "base template ready (build " + b.ID + ")"})
	return nil
}

// MmdebstrapArgs is the mmdebstrap command line (after the program name)
// that writes the base root filesystem to out.
func MmdebstrapArgs(out, mirror string) []string {
	return []string{
		"--format=tar", "--variant=minbase", "--include=" + strings.Join(BasePackages, ","),
		`--customize-hook=chroot "$1" useradd --create-home --shell /bin/bash --uid 1000 user`,
		`--customize-hook=echo "user ALL=(ALL:ALL) NOPASSWD: ALL" > "$1/etc/sudoers.d/user" && chmod 0440 "$1/etc/sudoers.d/user"`,
		`--customize-hook=rm -f "$1/etc/hostname" "$1/etc/resolv.conf"; : > "$1/etc/resolv.conf"`,
		BaseSuite, out, mirror,
	}
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
