package main

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/warren-sandbox/warren/internal/builder"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/pkg/client"
)

// The COPY contexts of a build: for each COPY/ADD step, the files of the
// build context that its source names go to the server as a gzip'd tar,
// under a hash computed as the E2B SDK computes it (so that the server's
// cache of uploads, keyed by that hash, works for both).

// buildContext is a build context directory with its .dockerignore.
type buildContext struct {
	dir    string
	ignore []ignoreRule
}

// openContext reads dir/.dockerignore, if there is one.
func openContext(dir string) (*buildContext, error) {
	bc := &buildContext{dir: dir}
	f, err := os.Open(filepath.Join(dir, ".dockerignore"))
	if errors.Is(err, fs.ErrNotExist) {
		return bc, nil
	}
	if err != nil {
		return nil, fmt.Errorf("build context %s: %w", dir, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		r, err := parseIgnore(line)
		if err != nil {
			return nil, fmt.Errorf("build context %s: .dockerignore: %w", dir, err)
		}
		bc.ignore = append(bc.ignore, r)
	}
	return bc, sc.Err()
}

// ignoreRule is one .dockerignore pattern (Docker's syntax: *, ?, [..],
// ** across directories, ! to re-include; a pattern that names a
// directory excludes what it holds).
type ignoreRule struct {
	re     *regexp.Regexp
	negate bool
}

func parseIgnore(p string) (ignoreRule, error) {
	r := ignoreRule{}
	if strings.HasPrefix(p, "!") {
		r.negate, p = true, strings.TrimSpace(p[1:])
	}
	p = strings.TrimPrefix(path.Clean("/"+filepath.ToSlash(p)), "/")
	var sb strings.Builder
	sb.WriteString("^")
	for i := 0; i < len(p); i++ {
		switch c := p[i]; c {
		case '*':
			if i+1 < len(p) && p[i+1] == '*' {
				i++
				if i+1 < len(p) && p[i+1] == '/' {
					i++
					sb.WriteString("(.*/)?")
				} else {
					sb.WriteString(".*")
				}
			} else {
				sb.WriteString("[^/]*")
			}
		case '?':
			sb.WriteString("[^/]")
		case '[':
			j := strings.IndexByte(p[i:], ']')
			if j < 0 {
				return r, fmt.Errorf("pattern %q: unclosed [: %w", p, errdefs.ErrInvalid)
			}
			class := p[i+1 : i+j]
			if strings.HasPrefix(class, "!") {
				class = "^" + class[1:]
			}
			sb.WriteString("[" + class + "]")
			i += j
		case '\\':
			if i+1 < len(p) {
				i++
				sb.WriteString(regexp.QuoteMeta(string(p[i])))
			}
		default:
			sb.WriteString(regexp.QuoteMeta(string(c)))
		}
	}
	sb.WriteString("(/.*)?$")
	re, err := regexp.Compile(sb.String())
	if err != nil {
		return r, fmt.Errorf("pattern %q: %v: %w", p, err, errdefs.ErrInvalid)
	}
	r.re = re
	return r, nil
}

// ignored reports whether the context path rel (slash-separated) is
// excluded: the last matching rule decides.
func (bc *buildContext) ignored(rel string) bool {
	out := false
	for _, r := range bc.ignore {
		if r.re.MatchString(rel) {
			out = !r.negate
		}
	}
	return out
}

// reincludes reports whether a ! rule may take back something below an
// excluded directory (then the walk goes on into it, as Docker's does).
func (bc *buildContext) reincludes() bool {
	return slices.ContainsFunc(bc.ignore, func(r ignoreRule) bool { return r.negate })
}

// ctxFile is one entry of a COPY context.
type ctxFile struct {
	abs, rel string // rel: slash-separated, "" for the context itself
	info     fs.FileInfo
}

// files returns what src names in the context, as the server's COPY reads
// it (a path or glob relative to the context, never outside): each match,
// and a directory's whole tree, sorted by path.
func (bc *buildContext) files(src string) ([]ctxFile, error) {
	rel := strings.TrimPrefix(path.Clean("/"+src), "/")
	if rel == "" {
		rel = "."
	}
	matches, err := filepath.Glob(filepath.Join(bc.dir, filepath.FromSlash(rel)))
	if err != nil {
		return nil, fmt.Errorf("COPY source %q: %v: %w", src, err, errdefs.ErrInvalid)
	}
	seen := map[string]bool{}
	var out []ctxFile
	add := func(p string, fi fs.FileInfo) bool {
		r, err := filepath.Rel(bc.dir, p)
		if err != nil {
			return false
		}
		r = filepath.ToSlash(r)
		if r == "." {
			r = ""
		}
		if r != "" && bc.ignored(r) {
			return false
		}
		if !seen[p] {
			seen[p] = true
			out = append(out, ctxFile{abs: p, rel: r, info: fi})
		}
		return true
	}
	for _, m := range matches {
		fi, err := os.Lstat(m)
		if err != nil {
			return nil, fmt.Errorf("COPY source %q: %w", src, err)
		}
		if !add(m, fi) || !fi.IsDir() {
			continue
		}
		err = filepath.WalkDir(m, func(p string, d fs.DirEntry, err error) error {
			if err != nil || p == m {
				return err
			}
			fi, err := d.Info()
			if err != nil {
				return err
			}
			if !add(p, fi) && d.IsDir() && !bc.reincludes() {
				return filepath.SkipDir
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("COPY source %q: %w", src, err)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("COPY source %q: no such file in the build context %s: %w", src, bc.dir, errdefs.ErrInvalid)
	}
	slices.SortFunc(out, func(a, b ctxFile) int { return strings.Compare(a.abs, b.abs) })
	return out, nil
}

// filesHash is the E2B SDK's hash of a COPY step's files (its
// calculateFilesHash without symlink resolution): SHA-256 over
// "COPY <src> <dest>", then for each file in path order its relative path,
// st_mode and size in decimal, and the content of a regular file or the
// target of a link.
func filesHash(typ, src, dest string, files []ctxFile) (string, error) {
	h := sha256.New()
	io.WriteString(h, typ+" "+src+" "+dest)
	for _, f := range files {
		io.WriteString(h, f.rel)
		mode, size := uint64(f.info.Mode().Perm()), f.info.Size()
		if st, ok := f.info.Sys().(*syscall.Stat_t); ok {
			mode = uint64(st.Mode)
		}
		io.WriteString(h, strconv.FormatUint(mode, 10))
		io.WriteString(h, strconv.FormatInt(size, 10))
		switch {
		case f.info.Mode()&fs.ModeSymlink != 0:
			l, err := os.Readlink(f.abs)
			if err != nil {
				return "", err
			}
			io.WriteString(h, l)
		case f.info.Mode().IsRegular():
			in, err := os.Open(f.abs)
			if err != nil {
				return "", err
			}
			_, err = io.Copy(h, in)
			in.Close()
			if err != nil {
				return "", err
			}
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// writeTarGz writes files as a gzip'd tar (paths relative to the
// context, owned by root: the COPY step sets the owner) to w.
func writeTarGz(w io.Writer, files []ctxFile) error {
	zw := gzip.NewWriter(w)
	tw := tar.NewWriter(zw)
	for _, f := range files {
		if f.rel == "" {
			continue // the context itself: the root of the archive
		}
		link := ""
		if f.info.Mode()&fs.ModeSymlink != 0 {
			l, err := os.Readlink(f.abs)
			if err != nil {
				return err
			}
			link = l
		} else if !f.info.IsDir() && !f.info.Mode().IsRegular() {
			continue // devices, sockets and pipes are not copied
		}
		hdr, err := tar.FileInfoHeader(f.info, link)
		if err != nil {
			return err
		}
		hdr.Name = f.rel
		if f.info.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = 0, 0, "", ""
		hdr.Format = tar.FormatPAX
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if f.info.Mode().IsRegular() {
			in, err := os.Open(f.abs)
			if err != nil {
				return err
			}
			_, err = io.Copy(tw, in)
			in.Close()
			if err != nil {
				return fmt.Errorf("%s: %w", f.rel, err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return zw.Close()
}

// copyContext holds the files of each COPY/ADD step of a build,
// read before the build is created.
type copyContext struct {
	files map[int][]ctxFile // by step index
	srcs  map[int]string    // the sources as resolved here (apiSteps)
}

// copyFiles reads the files of every COPY/ADD step and sets their hashes.
// srcs are the steps' sources as resolved here (apiSteps).
func copyFiles(bc *buildContext, steps []client.TemplateStep, srcs map[int]string) (*copyContext, error) {
	cc := &copyContext{files: map[int][]ctxFile{}, srcs: srcs}
	for i := range steps {
		st := &steps[i]
		if st.Type != builder.StepCopy && st.Type != builder.StepAdd {
			continue
		}
		src, ok := srcs[i]
		if len(st.Args) < 2 || !ok {
			return nil, fmt.Errorf("step %d: %s needs a source and a destination: %w", i+1, st.Type, errdefs.ErrInvalid)
		}
		dest := st.Args[1]
		if strings.Contains(src, "://") {
			return nil, fmt.Errorf("step %d: %s from a URL is not supported; download it in a RUN step: %w", i+1, st.Type, errdefs.ErrUnsupported)
		}
		files, err := bc.files(src)
		if err != nil {
			return nil, fmt.Errorf("step %d: %w", i+1, err)
		}
		hash, err := filesHash("COPY", src, dest, files)
		if err != nil {
			return nil, fmt.Errorf("step %d: hash %s: %w", i+1, src, err)
		}
		st.FilesHash = hash
		cc.files[i] = files
	}
	return cc, nil
}

// uploadContexts uploads the COPY contexts of cc that the server does not
// have yet for the template. logf reports each.
func uploadContexts(ctx context.Context, c *client.Client, templateID string, cc *copyContext, steps []client.TemplateStep, logf func(format string, args ...any)) error {
	done := map[string]bool{}
	for i, st := range steps {
		files, ok := cc.files[i]
		if !ok || done[st.FilesHash] {
			continue
		}
		done[st.FilesHash] = true
		up, err := c.TemplateFiles(ctx, templateID, st.FilesHash)
		if err != nil {
			return fmt.Errorf("step %d: %w", i+1, err)
		}
		src := cc.srcs[i]
		if up.Present || up.URL == "" {
			logf("[%d] %s %s: files already on the server", i+1, st.Type, src)
			continue
		}
		size, err := uploadTar(ctx, c, up, files)
		if err != nil {
			return fmt.Errorf("step %d: %s %s: %w", i+1, st.Type, src, err)
		}
		logf("[%d] %s %s: uploaded %d files (%d bytes)", i+1, st.Type, src, len(files), size)
	}
	return nil
}

// uploadTar spools files as a gzip'd tar to a temporary file (memory stays
// bounded, the size is known) and PUTs it to the upload URL.
func uploadTar(ctx context.Context, c *client.Client, up *client.FilesUpload, files []ctxFile) (int64, error) {
	tmp, err := os.CreateTemp("", "warren-context-*.tar.gz")
	if err != nil {
		return 0, err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	if err := writeTarGz(tmp, files); err != nil {
		return 0, fmt.Errorf("archive: %w", err)
	}
	size, err := tmp.Seek(0, io.SeekCurrent)
	if err != nil {
		return 0, err
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return 0, err
	}
	return size, c.UploadFiles(ctx, up, tmp, size)
}
