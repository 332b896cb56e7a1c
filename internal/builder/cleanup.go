package builder

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/templates"
)

// Scratch space and crash leftovers.
//
// Every Builder works in a session directory of its own, DataDir/work/s-<id>,
// and holds an exclusive lock (flock) on DataDir/work/s-<id>.lock for as
// long as it lives. Everything a build writes before it is complete goes
// there: the overlay mounts of steps and of the ready check, COPY contexts,
// image pulls, cache entries and uploads being written, layers being
// replaced. Finished things are renamed into place from there (layers into
// layers/<key>/diff, cache entries into layers/<key>/state.json, uploads
// into files/), so a crash can leave partial work only in a session.
//
// The kernel drops the lock when the process dies, however it dies, so
// Cleanup (at the next start) tells the session of a crashed process from
// that of a live one (another `warren template build`, say) by trying the
// lock. A stale session's mounts are unmounted, deepest first (lazily when
// busy), and its directory removed.

const (
	sessionPrefix = "s-"
	lockSuffix    = ".lock"
)

// session is a Builder's scratch directory and the lock that marks it live.
type session struct {
	dir     string
	release func()
}

func openSession(workDir string) (*session, error) {
	id := sessionPrefix + templates.NewTemplateID()[:12]
	dir := filepath.Join(workDir, id)
	release, err := lockFile(dir + lockSuffix)
	if err != nil {
		return nil, fmt.Errorf("builder: scratch session: %w", err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		release()
		os.Remove(dir + lockSuffix)
		return nil, fmt.Errorf("builder: scratch session: %w", err)
	}
	return &session{dir: dir, release: release}, nil
}

// close removes the session's directory and drops its lock.
func (s *session) close() error {
	err := os.RemoveAll(s.dir)
	os.Remove(s.dir + lockSuffix)
	s.release()
	return err
}

// scratchDir makes a new directory for one piece of work in b's session.
func (b *Builder) scratchDir(prefix string) (string, error) {
	b.sessMu.Lock()
	defer b.sessMu.Unlock()
	if b.sess == nil {
		return "", fmt.Errorf("builder is closed: %w", errdefs.ErrUnavailable)
	}
	return os.MkdirTemp(b.sess.dir, prefix)
}

// Close releases the Builder's scratch session. Builds must have ended
// (Service.Close waits for them); later builds fail.
func (b *Builder) Close() error {
	b.sessMu.Lock()
	defer b.sessMu.Unlock()
	if b.sess == nil {
		return nil
	}
	err := b.sess.close()
	b.sess = nil
	return err
}

// CleanupStats counts what Cleanup removed.
type CleanupStats struct {
	// Unmounted counts mounts below the work directory (overlays of build
	// steps and ready checks) of processes that are gone.
	Unmounted int
	// Sessions counts scratch sessions of crashed processes (and scratch
	// directories of older versions) removed.
	Sessions int
	// Partials counts half-written cache entries, pulls, layers and
	// uploads of older versions' layouts removed.
	Partials int
	// BuildDirs counts the files of failed or interrupted builds removed.
	BuildDirs int
	// Kept counts leftovers that could not be removed (still mounted,
	// unsafe path); they are logged.
	Kept int
}

// Total is the number of leftovers removed.
func (s CleanupStats) Total() int { return s.Unmounted + s.Sessions + s.Partials + s.BuildDirs }

// Cleanup removes what builds of crashed processes left under the data
// directory: their mounts and scratch sessions, partial cache entries and
// uploads, and the files of builds that are failed (Service.Recover marks
// interrupted builds failed first). It never touches a live session,
// finished layers, or the files of builds that are not failed. Call it at
// start, before builds run.
func (b *Builder) Cleanup(ctx context.Context) (CleanupStats, error) {
	var st CleanupStats
	var errs []error
	b.cleanWork(ctx, &st, &errs)

	b.cacheMu.Lock()
	b.cleanLegacy(&st, &errs)
	b.cacheMu.Unlock()

	n, err := b.cat.RemovePartial(ctx)
	st.Partials += n
	if err != nil {
		errs = append(errs, err)
	}
	b.cleanFailedBuilds(ctx, &st, &errs)
	return st, errors.Join(errs...)
}

func (b *Builder) workDir() string { return filepath.Join(b.cfg.DataDir, "work") }

// cleanWork removes stale sessions and any other entry of the work
// directory (older versions' step-, ready- and context- directories).
func (b *Builder) cleanWork(ctx context.Context, st *CleanupStats, errs *[]error) {
	work := b.workDir()
	entries, err := os.ReadDir(work)
	if err != nil {
		*errs = append(*errs, fmt.Errorf("build scratch %s: %w", work, err))
		return
	}
	b.sessMu.Lock()
	own := ""
	if b.sess != nil {
		own = filepath.Base(b.sess.dir)
	}
	b.sessMu.Unlock()
	for _, e := range entries {
		if ctx.Err() != nil {
			*errs = append(*errs, ctx.Err())
			return
		}
		name := e.Name()
		if name == own || name == own+lockSuffix {
			continue
		}
		p := filepath.Join(work, name)
		if strings.HasSuffix(name, lockSuffix) && strings.HasPrefix(name, sessionPrefix) {
			// A lock without its directory: a session that died between
			// the two, or whose directory went first below.
			if _, err := os.Lstat(strings.TrimSuffix(p, lockSuffix)); errors.Is(err, fs.ErrNotExist) {
				if release, ok := tryLockFile(p); ok {
					os.Remove(p)
					release()
				}
			}
			continue
		}
		release := func() {}
		if strings.HasPrefix(name, sessionPrefix) {
			r, ok := tryLockFile(p + lockSuffix)
			if !ok {
				continue // a live process works there
			}
			release = r
		}
		b.removeStale(p, st, errs)
		os.Remove(p + lockSuffix)
		release()
	}
}

// removeStale unmounts everything below p, deepest first, and removes p.
func (b *Builder) removeStale(p string, st *CleanupStats, errs *[]error) {
	mounts, err := mountsBelow(p)
	if err != nil {
		*errs = append(*errs, err)
		st.Kept++
		return
	}
	for _, m := range mounts {
		lazy, err := unmountBelow(p, m)
		if err != nil {
			b.log.Warn("build leftover: unmount", "path", m, "error", err)
			continue
		}
		st.Unmounted++
		b.log.Info("build leftover unmounted", "path", m, "lazy", lazy)
	}
	if left, err := mountsBelow(p); err != nil || len(left) > 0 {
		// Removing a tree with a mount in it would delete through the
		// mount; keep it for the next start.
		b.log.Warn("build leftover kept: still mounted", "path", p, "mounts", left, "error", err)
		st.Kept++
		return
	}
	if err := os.RemoveAll(p); err != nil {
		*errs = append(*errs, fmt.Errorf("build leftover %s: %w", p, err))
		st.Kept++
		return
	}
	st.Sessions++
	b.log.Info("build leftover removed", "path", p, "mounts", len(mounts))
}

// cleanLegacy removes partial files that older versions wrote beside
// finished ones: image pulls (layers/<key>/diff.pulling.*), replaced
// layers (diff.old.*), cache entries (state.json.tmp.*) and uploads
// (files/<template>/.upload-*). This version writes all of them in its
// session.
func (b *Builder) cleanLegacy(st *CleanupStats, errs *[]error) {
	remove := func(p string) {
		if err := os.RemoveAll(p); err != nil {
			*errs = append(*errs, fmt.Errorf("build leftover %s: %w", p, err))
			st.Kept++
			return
		}
		st.Partials++
		b.log.Info("build leftover removed", "path", p)
	}
	layers := filepath.Join(b.cfg.DataDir, "layers")
	keys, _ := os.ReadDir(layers)
	for _, k := range keys {
		if !k.IsDir() {
			continue
		}
		dir := filepath.Join(layers, k.Name())
		files, _ := os.ReadDir(dir)
		for _, f := range files {
			n := f.Name()
			if strings.HasPrefix(n, "diff.pulling.") || strings.HasPrefix(n, "diff.old.") || strings.HasPrefix(n, "state.json.tmp.") {
				remove(filepath.Join(dir, n))
			}
		}
	}
	files := filepath.Join(b.cfg.DataDir, "files")
	tpls, _ := os.ReadDir(files)
	for _, t := range tpls {
		if !t.IsDir() {
			continue
		}
		dir := filepath.Join(files, t.Name())
		ups, _ := os.ReadDir(dir)
		for _, u := range ups {
			if strings.HasPrefix(u.Name(), ".upload-") {
				remove(filepath.Join(dir, u.Name()))
			}
		}
	}
}

// cleanFailedBuilds removes the directories of failed builds (what an
// interrupted build had flattened, unpacked or snapshotted). Only a
// build's own directory goes: a failed sandbox snapshot's RootFSDir points
// at its source's tree, which stays.
func (b *Builder) cleanFailedBuilds(ctx context.Context, st *CleanupStats, errs *[]error) {
	all, err := b.cat.List(ctx, "")
	if err != nil {
		*errs = append(*errs, err)
		return
	}
	for _, t := range all {
		builds, err := b.cat.Builds(ctx, t.ID)
		if err != nil {
			*errs = append(*errs, err)
			return
		}
		for _, bd := range builds {
			if bd.Status != templates.BuildError {
				continue
			}
			dir := b.cat.BuildDir(bd.ID)
			if _, err := os.Lstat(dir); err != nil {
				continue
			}
			if mounts, err := mountsBelow(dir); err != nil || len(mounts) > 0 {
				b.log.Warn("failed build's files kept: mounted", "build_id", bd.ID, "path", dir, "mounts", mounts, "error", err)
				st.Kept++
				continue
			}
			if err := os.RemoveAll(dir); err != nil {
				*errs = append(*errs, fmt.Errorf("files of failed build %s: %w", bd.ID, err))
				st.Kept++
				continue
			}
			st.BuildDirs++
			b.log.Info("files of failed build removed", "template_id", t.ID, "build_id", bd.ID, "path", dir)
		}
	}
}

// safeBelow reports whether p lies below root with no symbolic link on
// the way (p itself included): an unmount or removal there cannot be led
// out of root.
func safeBelow(root, p string) bool {
	rel, err := filepath.Rel(root, p)
	if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, "../") || filepath.IsAbs(rel) {
		return false
	}
	cur := root
	for _, c := range strings.Split(rel, string(filepath.Separator)) {
		cur = filepath.Join(cur, c)
		fi, err := os.Lstat(cur)
		if err != nil || fi.Mode()&fs.ModeSymlink != 0 {
			return false
		}
	}
	return true
}

// unmountBelow unmounts mount point m, which must lie below root with no
// symbolic link on the way; lazily when it is busy.
func unmountBelow(root, m string) (lazy bool, err error) {
	if !safeBelow(root, m) {
		return false, fmt.Errorf("mount %s: not below %s without symbolic links: %w", m, root, errdefs.ErrInvalid)
	}
	return unmount(m)
}

// scratchFile makes a new file for one piece of work in b's session.
func (b *Builder) scratchFile(prefix string) (*os.File, error) {
	b.sessMu.Lock()
	defer b.sessMu.Unlock()
	if b.sess == nil {
		return nil, fmt.Errorf("builder is closed: %w", errdefs.ErrUnavailable)
	}
	return os.CreateTemp(b.sess.dir, prefix+"*")
}
