// Package buildcontext reads the files of a template build's COPY and ADD
// steps from a local build context directory and uploads them through
// E2B's template build API, as the E2B SDKs' Template.build() does: one
// gzip'd tar per step, under the hash the SDKs compute (so that the
// server's cache of uploads, keyed by it, serves builds from both).
// `warren template build` and pkg/e2b's BuildTemplate use it.
//
// Every file is read through an os.Root of the context directory: a COPY
// source never reaches outside it, neither by "../" (sources are
// relative to the context, as Docker's) nor through a symlink. A
// symlink is copied as a link, whatever it points at; a path that goes
// through a symlink leading out of the context is refused.
//
//	bc, err := buildcontext.Open(dir)
//	defer bc.Close()
//	up, err := bc.Prepare(steps, nil)             // sets each COPY step's FilesHash
//	created, err := c.CreateTemplate(ctx, ...)
//	err = up.Upload(ctx, c, created.TemplateID, nil)
//	err = c.StartTemplateBuild(ctx, created.TemplateID, created.BuildID, client.TemplateBuild{Steps: steps})
package buildcontext

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
)

// ErrInvalid is wrapped by the errors about a COPY source: a bad pattern,
// no such file, a path that leaves the context.
var ErrInvalid = errors.New("invalid COPY source")

// ErrUnsupported is wrapped by the errors about a COPY source the build
// context cannot serve (a URL).
var ErrUnsupported = errors.New("unsupported COPY source")

// Context is a build context directory with its .dockerignore.
type Context struct {
	dir    string
	root   *os.Root
	fsys   fs.FS
	ignore []ignoreRule
}

// Open opens the build context dir and reads its .dockerignore, if
// there is one. The caller closes it.
func Open(dir string) (*Context, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("build context %s: %w", dir, err)
	}
	bc := &Context{dir: dir, root: root, fsys: root.FS()}
	if err := bc.readIgnore(); err != nil {
		root.Close()
		return nil, fmt.Errorf("build context %s: %w", dir, err)
	}
	return bc, nil
}

// Close releases the context's directory.
func (bc *Context) Close() error { return bc.root.Close() }

// Dir is the context's directory.
func (bc *Context) Dir() string { return bc.dir }

func (bc *Context) readIgnore() error {
	f, err := bc.root.Open(".dockerignore")
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
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
			return fmt.Errorf(".dockerignore: %w", err)
		}
		bc.ignore = append(bc.ignore, r)
	}
	return sc.Err()
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
				return r, fmt.Errorf("pattern %q: unclosed [: %w", p, ErrInvalid)
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
		return r, fmt.Errorf("pattern %q: %v: %w", p, err, ErrInvalid)
	}
	r.re = re
	return r, nil
}

// ignored reports whether the context path rel (slash-separated) is
// excluded: the last matching rule decides.
func (bc *Context) ignored(rel string) bool {
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
func (bc *Context) reincludes() bool {
	return slices.ContainsFunc(bc.ignore, func(r ignoreRule) bool { return r.negate })
}

// File is one entry of a COPY source.
type File struct {
	// Path is slash-separated and relative to the context; "" is the
	// context itself.
	Path string
	// Info describes the entry itself (a symlink, not its target).
	Info fs.FileInfo
}

// Files returns what src names in the context, as the server's COPY reads
// it (a path or glob relative to the context, never outside): each match,
// and a directory's whole tree, sorted by path, less what .dockerignore
// excludes. Symlinks are entries of their own and are not followed.
func (bc *Context) Files(src string) ([]File, error) {
	rel := strings.TrimPrefix(path.Clean("/"+src), "/")
	if rel == "" {
		rel = "."
	}
	matches, err := bc.glob(rel)
	if err != nil {
		return nil, fmt.Errorf("COPY source %q: %w", src, err)
	}
	seen := map[string]bool{}
	var out []File
	add := func(p string, fi fs.FileInfo) bool {
		r := p
		if r == "." {
			r = ""
		}
		if r != "" && bc.ignored(r) {
			return false
		}
		if !seen[r] {
			seen[r] = true
			out = append(out, File{Path: r, Info: fi})
		}
		return true
	}
	for _, m := range matches {
		fi, err := bc.root.Lstat(m)
		if err != nil {
			return nil, fmt.Errorf("COPY source %q: %v: %w", src, err, ErrInvalid)
		}
		if !add(m, fi) || !fi.IsDir() {
			continue
		}
		err = fs.WalkDir(bc.fsys, m, func(p string, d fs.DirEntry, err error) error {
			if err != nil || p == m {
				return err
			}
			fi, err := d.Info()
			if err != nil {
				return err
			}
			if !add(p, fi) && d.IsDir() && !bc.reincludes() {
				return fs.SkipDir
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("COPY source %q: %w", src, err)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("COPY source %q: no such file in the build context %s: %w", src, bc.dir, ErrInvalid)
	}
	// Sorted as the absolute paths were: the context itself first.
	slices.SortFunc(out, func(a, b File) int { return strings.Compare(a.Path, b.Path) })
	return out, nil
}

// glob returns the context paths that the slash-separated pattern rel
// matches. The last element is not followed when it is a symlink; a
// directory on the way is, within the context only (os.Root refuses a
// symlink that leads out of it).
func (bc *Context) glob(rel string) ([]string, error) {
	if !hasMeta(rel) {
		_, err := bc.root.Lstat(rel)
		switch {
		case missing(err):
			return nil, nil
		case err != nil:
			return nil, fmt.Errorf("%v: %w", err, ErrInvalid)
		}
		return []string{rel}, nil
	}
	dir, file := path.Split(rel)
	dir = strings.TrimSuffix(dir, "/")
	if _, err := path.Match(file, ""); err != nil {
		return nil, fmt.Errorf("pattern %q: %v: %w", rel, err, ErrInvalid)
	}
	dirs := []string{"."}
	if dir != "" {
		var err error
		if dirs, err = bc.glob(dir); err != nil {
			return nil, err
		}
	}
	var out []string
	for _, d := range dirs {
		fi, err := bc.root.Stat(d)
		if missing(err) || (err == nil && !fi.IsDir()) {
			continue
		}
		entries, err := fs.ReadDir(bc.fsys, d)
		if err != nil {
			return nil, fmt.Errorf("%v: %w", err, ErrInvalid)
		}
		for _, e := range entries {
			if ok, _ := path.Match(file, e.Name()); ok {
				out = append(out, path.Join(d, e.Name()))
			}
		}
	}
	return out, nil
}

func hasMeta(p string) bool { return strings.ContainsAny(p, `*?[\`) }

// missing reports whether err says there is no such path (ENOTDIR: a
// file on the way).
func missing(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR)
}
