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

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/node/layer"
)

// copyContext returns the directory COPY sources come from, the part of
// the cache key that stands for them, and a cleanup function. The key
// part is a digest the server computes of the sources as unpacked, so a
// cache hit can only give a layer made from byte-identical sources; the
// client's filesHash only names the upload.
func (b *Builder) copyContext(ctx context.Context, buildID string, s Step, spec Spec) (string, string, func(), error) {
	noop := func() {}
	dir := spec.ContextDir
	cleanup := noop
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
		if dir, err = b.scratchDir("context-"); err != nil {
			return "", "", noop, err
		}
		cleanup = func() { os.RemoveAll(dir) }
		if err := layer.Unpack(ctx, zr, dir, b.contextLimits()); err != nil {
			cleanup()
			return "", "", noop, fmt.Errorf("files %s: %w", s.FilesHash, err)
		}
	} else if dir == "" {
		return "", "", noop, fmt.Errorf("COPY %s: no build context and no uploaded files: %w", s.Args[0], errdefs.ErrInvalid)
	}
	cr, err := os.OpenRoot(dir)
	if err != nil {
		cleanup()
		return "", "", noop, fmt.Errorf("build context: %w", err)
	}
	defer cr.Close()
	h, err := hashSources(cr, s.Args[0])
	if err != nil {
		cleanup()
		return "", "", noop, err
	}
	return dir, "sources:" + h, cleanup, nil
}

// cleanSource checks that a COPY/ADD source names a path inside the build
// context and returns it clean and slash-separated ("." is the whole
// context). Absolute sources and ones whose ".." climbs out of the
// context are refused, as the E2B SDK does ("a/../b" is "b"): a source is
// a path in the context, never one on the server.
func cleanSource(src string) (string, error) {
	if path.IsAbs(src) {
		return "", fmt.Errorf("COPY source %q is absolute; sources are paths relative to the build context: %w", src, errdefs.ErrInvalid)
	}
	rel := path.Clean(src)
	if rel == ".." || strings.HasPrefix(rel, "../") {
		return "", fmt.Errorf("COPY source %q reaches outside the build context (\"..\"): %w", src, errdefs.ErrInvalid)
	}
	return rel, nil
}

// sourceMatches returns the context paths (relative to ctx, slash
// separated, sorted) that src (a path or glob) names; none is an error.
// Every lookup goes through ctx, so symbolic links met on the way are
// followed only inside the context (the kernel refuses the rest); a
// source that is itself a link is matched as the link.
func sourceMatches(ctx *os.Root, src string) ([]string, error) {
	rel, err := cleanSource(src)
	if err != nil {
		return nil, err
	}
	if rel == "." {
		return []string{"."}, nil
	}
	dir, last := path.Split(rel)
	dir = strings.TrimSuffix(dir, "/")
	if dir == "" {
		dir = "."
	}
	fsys := ctx.FS()
	dirs := []string{dir}
	if hasMeta(dir) {
		if dirs, err = fs.Glob(fsys, dir); err != nil {
			return nil, fmt.Errorf("COPY source %q: %v: %w", src, err, errdefs.ErrInvalid)
		}
	}
	var matches []string
	for _, d := range dirs {
		if !hasMeta(last) {
			if _, err := ctx.Lstat(path.Join(d, last)); err == nil {
				matches = append(matches, path.Join(d, last))
			}
			continue
		}
		entries, err := fs.ReadDir(fsys, d)
		if err != nil {
			continue // not a directory, or a link leading out of the context
		}
		for _, e := range entries {
			ok, err := path.Match(last, e.Name())
			if err != nil {
				return nil, fmt.Errorf("COPY source %q: %v: %w", src, err, errdefs.ErrInvalid)
			}
			if ok {
				matches = append(matches, path.Join(d, e.Name()))
			}
		}
	}
	if len(matches) == 0 {
		return nil, fmt.Errorf("COPY source %q: no such file in the build context (symbolic links are followed only inside it): %w", src, errdefs.ErrInvalid)
	}
	sort.Strings(matches)
	return matches, nil
}

func hasMeta(p string) bool { return strings.ContainsAny(p, `*?[\`) }

// walkSources calls fn for every entry that src names in ctx and, for
// directories, every entry below them (links are not followed), with
// paths relative to ctx.
func walkSources(ctx *os.Root, src string, fn func(match, rel string, fi fs.FileInfo) error) error {
	matches, err := sourceMatches(ctx, src)
	if err != nil {
		return err
	}
	for _, m := range matches {
		fi, err := ctx.Lstat(m)
		if err != nil {
			return err
		}
		if !fi.IsDir() {
			if err := fn(m, m, fi); err != nil {
				return err
			}
			continue
		}
		err = fs.WalkDir(ctx.FS(), m, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			fi, err := d.Info()
			if err != nil {
				return err
			}
			return fn(m, p, fi)
		})
		if err != nil {
			return fmt.Errorf("COPY source %q: %w", src, err)
		}
	}
	return nil
}

// hashSources hashes the names, modes, link targets and contents of what
// src names in the context: the files part of a COPY step's cache key,
// computed by the server from what is there (never taken from a client).
func hashSources(ctx *os.Root, src string) (string, error) {
	h := sha256.New()
	err := walkSources(ctx, src, func(_, rel string, fi fs.FileInfo) error {
		fmt.Fprintf(h, "%d:%s\x00%o\x00", len(rel), rel, fi.Mode())
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			l, err := ctx.Readlink(rel)
			if err != nil {
				return err
			}
			fmt.Fprintf(h, "%d:%s", len(l), l)
		case fi.Mode().IsRegular():
			f, err := openRegular(ctx, rel)
			if err != nil {
				return err
			}
			fmt.Fprintf(h, "%d:", fi.Size())
			_, err = io.Copy(h, io.LimitReader(f, fi.Size()))
			f.Close()
			if err != nil {
				return err
			}
		}
		h.Write([]byte{0})
		return nil
	})
	if err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// openRegular opens the regular file rel of ctx for reading.
func openRegular(ctx *os.Root, rel string) (*os.File, error) {
	f, err := ctx.Open(rel)
	if err != nil {
		return nil, err
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("COPY source %q changed while read: %w", rel, errdefs.ErrConflict)
	}
	return f, nil
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
	cr, err := os.OpenRoot(contextDir)
	if err != nil {
		return fmt.Errorf("build context: %w", err)
	}
	defer cr.Close()
	matches, err := sourceMatches(cr, src)
	if err != nil {
		return err
	}
	if !path.IsAbs(dest) {
		dest = path.Join(orRoot(ns.Workdir), dest)
	}
	dest = path.Clean(dest)
	destIsDir := strings.HasSuffix(s.Args[1], "/") || len(matches) > 1
	if hp, err := layer.ResolveInRoot(root, dest); err == nil {
		if fi, err := os.Stat(hp); err == nil && fi.IsDir() {
			destIsDir = true
		}
	}
	c := copier{ctx: cr, root: root, uid: uid, gid: gid, mode: mode}
	made := map[string]bool{}
	return walkSources(cr, src, func(match, rel string, fi fs.FileInfo) error {
		var target string
		switch {
		case rel == match && fi.IsDir():
			// A directory's contents go into dest.
			return mkdirAllOwned(root, dest, uid, gid)
		case fi.IsDir() || rel != match:
			sub := strings.TrimPrefix(rel, match+"/")
			if match == "." {
				sub = rel
			}
			target = path.Join(dest, sub)
		case destIsDir:
			target = path.Join(dest, path.Base(rel))
		default:
			target = dest
		}
		if d := path.Dir(target); !made[d] && (rel == match) {
			if err := mkdirAllOwned(root, d, uid, gid); err != nil {
				return err
			}
			made[d] = true
		}
		return c.entry(rel, target, fi)
	})
}

// copier copies entries of the build context (ctx) into a build's root
// file system (root).
type copier struct {
	ctx      *os.Root
	root     string
	uid, gid int
	mode     os.FileMode
}

// entry copies the context's file, directory or link src (a path in the
// context: links are copied as links) to target (a path in root).
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
		l, err := c.ctx.Readlink(src)
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
		in, err := openRegular(c.ctx, src)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.OpenFile(hp, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, io.LimitReader(in, fi.Size())); err != nil {
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
