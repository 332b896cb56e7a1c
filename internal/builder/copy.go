package builder

import (
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/warren-sandbox/warren/internal/builder/layer"
	"github.com/warren-sandbox/warren/internal/errdefs"
)

// copyContext returns the directory COPY sources come from, the part of
// the cache key that stands for them, and a cleanup function.
func (b *Builder) copyContext(ctx context.Context, buildID string, s Step, spec Spec) (string, string, func(), error) {
	noop := func() {}
	if s.FilesHash != "" {
		bd, err := b.cat.Build(ctx, buildID)
		if err != nil {
			return "", "", noop, err
		}
		p, err := b.filesPath(bd.TemplateID, s.FilesHash)
		if err != nil {
			return "", "", noop, err
		}
		f, err := os.Open(p)
		if err != nil {
			return "", "", noop, fmt.Errorf("files %s of COPY %s were not uploaded: %w", s.FilesHash, s.Args[0], errdefs.ErrInvalid)
		}
		defer f.Close()
		zr, err := gzip.NewReader(f)
		if err != nil {
			return "", "", noop, fmt.Errorf("files %s: not a gzip'd tar: %w", s.FilesHash, errdefs.ErrInvalid)
		}
		dir, err := b.scratchDir("context-")
		if err != nil {
			return "", "", noop, err
		}
		cleanup := func() { os.RemoveAll(dir) }
		if err := layer.Unpack(ctx, zr, dir, nil); err != nil {
			cleanup()
			return "", "", noop, fmt.Errorf("files %s: %w", s.FilesHash, err)
		}
		return dir, "files:" + s.FilesHash, cleanup, nil
	}
	if spec.ContextDir == "" {
		return "", "", noop, fmt.Errorf("COPY %s: no build context and no uploaded files: %w", s.Args[0], errdefs.ErrInvalid)
	}
	h, err := hashSources(spec.ContextDir, s.Args[0])
	if err != nil {
		return "", "", noop, err
	}
	return spec.ContextDir, "sources:" + h, noop, nil
}

// sourceMatches returns the context paths that src (a path or glob,
// relative to the context) names; none is an error.
func sourceMatches(contextDir, src string) ([]string, error) {
	rel := strings.TrimPrefix(path.Clean("/"+src), "/")
	if rel == "" {
		rel = "."
	}
	matches, err := filepath.Glob(filepath.Join(contextDir, rel))
	if err != nil {
		return nil, fmt.Errorf("COPY source %q: %v: %w", src, err, errdefs.ErrInvalid)
	}
	if len(matches) == 0 {
		return nil, fmt.Errorf("COPY source %q: no such file in the build context: %w", src, errdefs.ErrInvalid)
	}
	sort.Strings(matches)
	return matches, nil
}

// hashSources hashes the names, modes, link targets and contents of what
// src names in the context: the files part of a COPY step's cache key.
func hashSources(contextDir, src string) (string, error) {
	matches, err := sourceMatches(contextDir, src)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	for _, m := range matches {
		err := filepath.WalkDir(m, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(contextDir, p)
			fi, err := d.Info()
			if err != nil {
				return err
			}
			fmt.Fprintf(h, "%s\x00%o\x00", rel, fi.Mode())
			switch {
			case fi.Mode()&fs.ModeSymlink != 0:
				l, err := os.Readlink(p)
				if err != nil {
					return err
				}
				io.WriteString(h, l)
			case fi.Mode().IsRegular():
				f, err := os.Open(p)
				if err != nil {
					return err
				}
				_, err = io.Copy(h, f)
				f.Close()
				if err != nil {
					return err
				}
			}
			h.Write([]byte{0})
			return nil
		})
		if err != nil {
			return "", fmt.Errorf("COPY source %q: %w", src, err)
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// copyStep copies COPY/ADD sources from contextDir into root (Docker's
// rules: a directory's contents go into dest; several sources or a dest
// ending in "/" make dest a directory). Files belong to the step's user
// argument (root by default) and take its mode argument when given.
func copyStep(root, contextDir string, s Step, ns *state) error {
	src, dest := s.Args[0], s.Args[1]
	if strings.Contains(src, "://") {
		return fmt.Errorf("%s from a URL is not supported; download it in a RUN step: %w", s.Type, errdefs.ErrUnsupported)
	}
	uid, gid := 0, 0
	if len(s.Args) > 2 && s.Args[2] != "" {
		u, err := lookupUser(root, s.Args[2])
		if err != nil {
			return err
		}
		uid, gid = u.UID, u.GID
	}
	var mode os.FileMode
	if len(s.Args) > 3 && s.Args[3] != "" {
		m, err := strconv.ParseUint(s.Args[3], 8, 32)
		if err != nil {
			return fmt.Errorf("mode %q is not octal: %w", s.Args[3], errdefs.ErrInvalid)
		}
		mode = os.FileMode(m) & 0o7777
	}
	matches, err := sourceMatches(contextDir, src)
	if err != nil {
		return err
	}
	if !path.IsAbs(dest) {
		dest = path.Join(orRoot(ns.Workdir), dest)
	}
	destIsDir := strings.HasSuffix(s.Args[1], "/") || len(matches) > 1
	if hp, err := layer.ResolveInRoot(root, dest); err == nil {
		if fi, err := os.Stat(hp); err == nil && fi.IsDir() {
			destIsDir = true
		}
	}
	c := copier{root: root, uid: uid, gid: gid, mode: mode}
	for _, m := range matches {
		fi, err := os.Lstat(m)
		if err != nil {
			return err
		}
		if fi.IsDir() {
			if err := c.tree(m, path.Clean(dest)); err != nil {
				return err
			}
			continue
		}
		target := path.Clean(dest)
		if destIsDir {
			target = path.Join(target, filepath.Base(m))
		}
		if err := mkdirAllOwned(root, path.Dir(target), uid, gid); err != nil {
			return err
		}
		if err := c.entry(m, target, fi); err != nil {
			return err
		}
	}
	return nil
}

type copier struct {
	root     string
	uid, gid int
	mode     os.FileMode
}

// tree copies the contents of the host directory src into dest (a path in
// root).
func (c copier) tree(src, dest string) error {
	if err := mkdirAllOwned(c.root, dest, c.uid, c.gid); err != nil {
		return err
	}
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if rel == "." {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		return c.entry(p, path.Join(dest, filepath.ToSlash(rel)), fi)
	})
}

// entry copies one file, directory or link to target (a path in root).
func (c copier) entry(src, target string, fi fs.FileInfo) error {
	parent, err := layer.ResolveInRoot(c.root, path.Dir(target))
	if err != nil {
		return err
	}
	hp := filepath.Join(parent, path.Base(target))
	mode := fi.Mode().Perm()
	if c.mode != 0 {
		mode = c.mode
	}
	switch {
	case fi.IsDir():
		if ex, err := os.Lstat(hp); err == nil && !ex.IsDir() {
			if err := os.Remove(hp); err != nil {
				return err
			}
		}
		if err := os.Mkdir(hp, 0o755); err != nil && !os.IsExist(err) {
			return err
		}
	case fi.Mode()&fs.ModeSymlink != 0:
		l, err := os.Readlink(src)
		if err != nil {
			return err
		}
		os.RemoveAll(hp)
		if err := os.Symlink(l, hp); err != nil {
			return err
		}
		return os.Lchown(hp, c.uid, c.gid)
	case fi.Mode().IsRegular():
		if ex, err := os.Lstat(hp); err == nil {
			if err := os.RemoveAll(hp); err != nil {
				return err
			}
			_ = ex
		}
		in, err := os.Open(src)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.OpenFile(hp, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		if err := out.Close(); err != nil {
			return err
		}
	default:
		return nil // devices, sockets and pipes are not copied
	}
	if err := os.Lchown(hp, c.uid, c.gid); err != nil {
		return err
	}
	return os.Chmod(hp, mode)
}
