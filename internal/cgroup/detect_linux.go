package cgroup

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/mountinfo"
)

// NewManager detects the host's cgroup layout and returns a manager that
// keeps every sandbox cgroup under root (DefaultRoot when empty).
//
// A host with a v1 memory hierarchy (a v1-only or hybrid host) gets the v1
// manager, which also cleans the sandbox's directory in the unified tree
// that OCI runtimes create on hybrid hosts. A host with only a unified
// hierarchy gets the v2 manager.
func NewManager(root string, log *slog.Logger) (Manager, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if root == "" {
		root = DefaultRoot
	}
	root = strings.Trim(root, "/")
	for _, part := range strings.Split(root, "/") {
		if err := validName(part); err != nil {
			return nil, fmt.Errorf("cgroup root %q: %w", root, errdefs.ErrInvalid)
		}
	}
	layout, err := readLayout("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	if _, ok := layout.v1["memory"]; ok {
		m, err := newV1(layout, root, log)
		if err != nil {
			return nil, err
		}
		log.Info("cgroup manager", "mode", "v1", "root", root, "unified", layout.unified)
		return m, nil
	}
	if layout.unified != "" {
		log.Info("cgroup manager", "mode", "v2", "root", root, "mount", layout.unified)
		return newV2(layout.unified, root, log), nil
	}
	return nil, fmt.Errorf("cgroup: no cgroup v1 memory hierarchy and no cgroup2 mount: %w", errdefs.ErrUnavailable)
}

// layout is where the host's cgroup hierarchies are mounted.
type layout struct {
	v1      map[string]string // controller (or "name=x") -> mount point
	unified string            // cgroup2 mount point, "" if none
}

// mountPoints returns the distinct v1 mount points, sorted.
func (l layout) mountPoints() []string {
	seen := map[string]bool{}
	var out []string
	for _, mp := range l.v1 {
		if !seen[mp] {
			seen[mp] = true
			out = append(out, mp)
		}
	}
	sort.Strings(out)
	return out
}

func readLayout(path string) (layout, error) {
	l := layout{v1: map[string]string{}}
	data, err := os.ReadFile(path)
	if err != nil {
		return l, fmt.Errorf("cgroup: read %s: %w", path, errors.Join(errdefs.ErrUnavailable, err))
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		pre, post, ok := strings.Cut(line, " - ")
		if !ok {
			continue
		}
		pf, qf := strings.Fields(pre), strings.Fields(post)
		if len(pf) < 5 || len(qf) < 3 {
			continue
		}
		mp := mountinfo.Unescape(pf[4])
		switch qf[0] {
		case "cgroup2":
			// Prefer the conventional locations when several exist.
			if l.unified == "" || mp == "/sys/fs/cgroup" || mp == "/sys/fs/cgroup/unified" {
				l.unified = mp
			}
		case "cgroup":
			for _, opt := range strings.Split(qf[2], ",") {
				switch opt {
				case "rw", "ro", "relatime", "noatime", "nosuid", "nodev", "noexec", "clone_children", "xattr":
					continue
				}
				if strings.HasPrefix(opt, "release_agent=") {
					continue
				}
				if _, dup := l.v1[opt]; !dup {
					l.v1[opt] = mp
				}
			}
		}
	}
	return l, nil
}

// writeFile writes value into a cgroup control file.
func writeFile(dir, file, value string) error {
	p := filepath.Join(dir, file)
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	_, werr := f.WriteString(value)
	cerr := f.Close()
	if werr != nil {
		return fmt.Errorf("write %q to %s: %w", value, p, werr)
	}
	return cerr
}

func readString(dir, file string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

// readUint reads a file holding one number; "max" reads as 0.
func readUint(dir, file string) (uint64, error) {
	s, err := readString(dir, file)
	if err != nil {
		return 0, err
	}
	if s == "max" {
		return 0, nil
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse %s/%s %q: %w", dir, file, s, err)
	}
	return v, nil
}

// readKeyed reads a "key value" file (memory.events, cpu.stat, oom_control).
func readKeyed(dir, file string) (map[string]uint64, error) {
	s, err := readString(dir, file)
	if err != nil {
		return nil, err
	}
	out := map[string]uint64{}
	for _, line := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), " ")
		if !ok {
			continue
		}
		if n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64); err == nil {
			out[k] = n
		}
	}
	return out, nil
}

// procsTree returns the PIDs in dir's cgroup.procs and in those of every
// descendant cgroup.
func procsTree(dir string, into map[int]bool) error {
	s, err := readString(dir, "cgroup.procs")
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	for _, f := range strings.Fields(s) {
		if pid, err := strconv.Atoi(f); err == nil {
			into[pid] = true
		}
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	for _, e := range ents {
		if e.IsDir() {
			if err := procsTree(filepath.Join(dir, e.Name()), into); err != nil {
				return err
			}
		}
	}
	return nil
}

func sortedPids(set map[int]bool) []int {
	out := make([]int, 0, len(set))
	for p := range set {
		out = append(out, p)
	}
	sort.Ints(out)
	return out
}

// killPids sends SIGKILL to every pid; a pid that is already gone is fine.
func killPids(pids map[int]bool) {
	for pid := range pids {
		if pid > 0 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// rmdirTree removes dir and its descendant cgroups, deepest first. A cgroup
// whose last task is still exiting answers EBUSY; rmdirTree retries until
// deadline. A missing dir is not an error.
func rmdirTree(ctx context.Context, dir string, deadline time.Time) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	for _, e := range ents {
		if e.IsDir() {
			if err := rmdirTree(ctx, filepath.Join(dir, e.Name()), deadline); err != nil {
				return err
			}
		}
	}
	backoff := time.Millisecond
	for {
		err := syscall.Rmdir(dir)
		if err == nil || errors.Is(err, syscall.ENOENT) {
			return nil
		}
		if !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
			return fmt.Errorf("rmdir %s: %w", dir, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("rmdir %s: %w", dir, ctx.Err())
		case <-time.After(backoff):
		}
		if backoff < 50*time.Millisecond {
			backoff *= 2
		}
	}
}

// listChildren returns the NamePrefix children of dir.
func listChildren(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if e.IsDir() && strings.HasPrefix(e.Name(), NamePrefix) {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// exists reports whether path is an existing directory.
func exists(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.IsDir()
}

// killTimeout bounds how long KillAll waits for killed tasks to leave.
const killTimeout = 15 * time.Second
