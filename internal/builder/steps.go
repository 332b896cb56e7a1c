package builder

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/warren-sandbox/warren/internal/atomicfile"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/node/layer"
	"github.com/warren-sandbox/warren/internal/sandbox"
	"github.com/warren-sandbox/warren/internal/templates"
)

// e2bBaseImage is the image E2B's SDK names when a template has no base;
// Warren serves it from its own base template, with no registry.
const e2bBaseImage = "e2bdev/base"

func isE2BBase(ref string) bool {
	name, _, _ := strings.Cut(ref, "@")
	if i := strings.LastIndex(name, ":"); i > strings.LastIndex(name, "/") {
		name = name[:i]
	}
	name = strings.TrimPrefix(strings.TrimPrefix(name, "docker.io/"), "index.docker.io/")
	return name == e2bBaseImage
}

// base returns the state the steps start from, and, when the base is a
// template, the function that unpins its tree (pinned from its
// resolution on, until the build ends).
func (b *Builder) base(ctx context.Context, spec Spec, bl *buildLog) (*state, func(), error) {
	if spec.FromImage != "" && spec.FromTemplate != "" {
		return nil, nil, &StepError{Step: "base", Command: "FROM", Err: fmt.Errorf("fromImage and fromTemplate are exclusive: %w", errdefs.ErrInvalid)}
	}
	ref := spec.FromTemplate
	if spec.FromImage != "" && isE2BBase(spec.FromImage) {
		bl.add(templates.LogInfo, "base", "Image "+spec.FromImage+" is served by the local base template")
		ref = templates.BaseID
	} else if spec.FromImage == "" && ref == "" {
		ref = templates.BaseID
	}
	if ref != "" {
		bl.add(templates.LogInfo, "base", "FROM template "+ref)
		nt, err := b.cat.Resolve(ctx, spec.TeamID, ref)
		if err != nil {
			return nil, nil, &StepError{Step: "base", Command: "FROM template " + ref, Err: err}
		}
		// The tree was tagged a moment ago; the collector waits a grace
		// period after a build stops being tagged, far longer than this.
		unpin := b.pinTree(nt.RootFS)
		return &state{
			Key:     hashKey("template", nt.BuildID),
			Layers:  []string{nt.RootFS},
			Env:     templates.MergeEnv(nt.Env, nil, nil),
			Args:    map[string]string{},
			User:    "root",
			Workdir: nt.Workdir,
		}, unpin, nil
	}
	bl.add(templates.LogInfo, "base", "FROM "+spec.FromImage)
	img, digest, err := b.remoteImage(ctx, spec.FromImage, spec.RegistryAuth)
	if err != nil {
		return nil, nil, &StepError{Step: "base", Command: "FROM " + spec.FromImage, Err: err}
	}
	ic, err := readImageConfig(img)
	if err != nil {
		return nil, nil, &StepError{Step: "base", Command: "FROM " + spec.FromImage, Err: classifyRegistryError(spec.FromImage, fmt.Errorf("image config: %w", err))}
	}
	key := hashKey("image", digest)
	dir := b.layerDir(key)
	if _, err := os.Stat(dir); err != nil {
		bl.add(templates.LogInfo, "base", "Pulling "+spec.FromImage+" ("+digest+")")
		// Pulled in the session, renamed into place complete: a crash
		// leaves no partial image in the cache.
		scratch, err := b.scratchDir("pull-")
		if err != nil {
			return nil, nil, err
		}
		defer os.RemoveAll(scratch)
		tmp := filepath.Join(scratch, "diff")
		if err := os.Mkdir(tmp, 0o755); err != nil {
			return nil, nil, err
		}
		if err := unpackImage(ctx, img, tmp, b.imageLimits()); err != nil {
			if !errdefs.IsExhausted(err) {
				err = classifyRegistryError(spec.FromImage, err)
			}
			return nil, nil, &StepError{Step: "base", Command: "FROM " + spec.FromImage, Err: err}
		}
		if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
			return nil, nil, err
		}
		if err := os.Rename(tmp, dir); err != nil && !errors.Is(err, os.ErrExist) && !errors.Is(err, syscall.ENOTEMPTY) {
			return nil, nil, err
		} // else another build won the race: same content
	} else {
		now := time.Now()
		os.Chtimes(dir, now, now) // last use, for PruneCache
		bl.add(templates.LogInfo, "base", "CACHED "+spec.FromImage+" ("+digest+")")
	}
	env := ic.Env
	if _, ok := env["PATH"]; !ok {
		env["PATH"] = templates.DefaultPath
	}
	user := ic.User
	if user == "" {
		user = "root"
	}
	return &state{Key: key, Layers: []string{dir}, Env: env, Args: map[string]string{}, User: user, Workdir: ic.Workdir, Cmd: ic.Cmd}, nil, nil
}

func (b *Builder) layerDir(key string) string {
	return filepath.Join(b.cfg.DataDir, "layers", key, "diff")
}

func (b *Builder) stateFile(key string) string {
	return filepath.Join(b.cfg.DataDir, "layers", key, "state.json")
}

// cacheLoad returns the cached state after the step with key, if its
// layers are all still there.
func (b *Builder) cacheLoad(key string) (*state, bool) {
	data, err := os.ReadFile(b.stateFile(key))
	if err != nil {
		return nil, false
	}
	var st state
	if json.Unmarshal(data, &st) != nil || st.Key != key {
		return nil, false
	}
	for _, l := range st.Layers {
		if _, err := os.Stat(l); err != nil {
			return nil, false
		}
	}
	now := time.Now()
	os.Chtimes(b.stateFile(key), now, now) // last use, for PruneCache
	return &st, true
}

// PruneCache removes layer cache entries (and pulled images) not used for
// maxAge. Template builds keep their own files (hard links), so pruning
// only costs later builds their cache hits. It waits for running builds.
func (b *Builder) PruneCache(ctx context.Context, maxAge time.Duration) (removed int, err error) {
	b.cacheMu.Lock()
	defer b.cacheMu.Unlock()
	dir := filepath.Join(b.cfg.DataDir, "layers")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, fmt.Errorf("prune layer cache: %w", err)
	}
	cutoff := time.Now().Add(-maxAge)
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return removed, err
		}
		p := filepath.Join(dir, e.Name())
		last := time.Time{}
		for _, f := range []string{"state.json", "diff"} {
			if fi, err := os.Stat(filepath.Join(p, f)); err == nil && fi.ModTime().After(last) {
				last = fi.ModTime()
			}
		}
		if last.After(cutoff) {
			continue
		}
		if err := os.RemoveAll(p); err != nil {
			return removed, fmt.Errorf("prune layer cache: %w", err)
		}
		removed++
	}
	return removed, nil
}

func (b *Builder) cacheStore(st *state) error {
	data, err := json.Marshal(st)
	if err != nil {
		return err
	}
	p := b.stateFile(st.Key)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	// Written in the session, renamed into place: the entry appears
	// complete or not at all.
	f, err := b.scratchFile("state-")
	if err != nil {
		return err
	}
	return atomicfile.Commit(f, data, p)
}

// describe renders a step for logs.
func describe(s Step) string {
	return strings.TrimSpace(s.Type + " " + strings.Join(s.Args, " "))
}

// step runs (or takes from the cache) one step. cached says whether the
// cache may be used; it stays true only while every step was a hit.
func (b *Builder) step(ctx context.Context, buildID, name string, s Step, st *state, spec Spec, cached bool, bl *buildLog) (*state, bool, error) {
	desc := describe(s)
	fail := func(err error) (*state, bool, error) {
		return nil, false, &StepError{Step: name, Command: desc, Err: err}
	}
	if s.Expand {
		vars := templates.MergeEnv(st.Args, st.Env, nil) // ENV wins over ARG
		var err error
		if s, err = expandStep(s, vars); err != nil {
			return fail(err)
		}
		desc = describe(s)
	}
	if err := validateStep(s); err != nil {
		return fail(err)
	}
	filesPart := ""
	var contextDir string
	if s.Type == StepCopy || s.Type == StepAdd {
		var cleanup func()
		var err error
		contextDir, filesPart, cleanup, err = b.copyContext(ctx, buildID, s, spec)
		if err != nil {
			return fail(err)
		}
		defer cleanup()
	}
	key := hashKey(st.Key, s.Type, mustJSON(s.Args), filesPart)
	if cached {
		if ns, ok := b.cacheLoad(key); ok {
			bl.add(templates.LogInfo, name, "CACHED ["+name+"] "+desc)
			return ns, true, nil
		}
	}
	bl.add(templates.LogInfo, name, "["+name+"] "+desc)
	ns := st.clone()
	ns.Key = key
	var err error
	switch s.Type {
	case StepEnv:
		for i := 0; i+1 < len(s.Args); i += 2 {
			ns.Env[s.Args[i]] = s.Args[i+1]
		}
	case StepArg:
		if _, set := ns.Args[s.Args[0]]; !set || len(s.Args) > 1 {
			v := ""
			if len(s.Args) > 1 {
				v = s.Args[1]
			}
			ns.Args[s.Args[0]] = v
		}
	case StepWorkdir:
		dir := s.Args[0]
		if !path.IsAbs(dir) {
			dir = path.Join(orRoot(ns.Workdir), dir)
		}
		ns.Workdir = path.Clean(dir)
		err = b.withLayer(ctx, buildID, name, ns, 0, func(root string) error {
			u, err := lookupUser(root, ns.User)
			if err != nil {
				return err
			}
			return mkdirAllOwned(root, ns.Workdir, u.UID, u.GID)
		})
	case StepUser:
		ns.User = s.Args[0]
		ns.ExplicitUser = true
		err = b.withLayer(ctx, buildID, name, ns, 0, func(root string) error {
			_, err := ensureUser(root, ns.User, false)
			return err
		})
	case StepRun:
		var mb int64
		if mb, err = b.scratchMB(ctx, buildID); err != nil {
			return fail(err)
		}
		err = b.withLayer(ctx, buildID, name, ns, mb, func(root string) error {
			return b.run(ctx, buildID, name, root, s, ns, bl)
		})
	case StepCopy, StepAdd:
		err = b.withLayer(ctx, buildID, name, ns, 0, func(root string) error {
			return copyStep(root, contextDir, s, ns)
		})
	}
	if err != nil {
		var se *StepError
		if errors.As(err, &se) {
			return nil, false, err
		}
		return fail(err)
	}
	if err := b.cacheStore(ns); err != nil {
		b.log.Warn("store layer cache entry", "build_id", buildID, "error", err)
	}
	return ns, false, nil
}

func orRoot(dir string) string {
	if dir == "" {
		return "/"
	}
	return dir
}

func validateStep(s Step) error {
	n := len(s.Args)
	ok := true
	switch s.Type {
	case StepRun:
		ok = n == 1 || n == 2
	case StepCopy, StepAdd:
		ok = n >= 2 && n <= 4
	case StepEnv:
		ok = n >= 2 && n%2 == 0
	case StepArg:
		ok = n == 1 || n == 2
	case StepWorkdir, StepUser:
		ok = n == 1 && s.Args[0] != ""
	default:
		return errdefs.Publicf(errdefs.ErrInvalid, "unsupported step type %q (supported: RUN, COPY, ADD, ENV, ARG, WORKDIR, USER)", s.Type)
	}
	if !ok || (n > 0 && s.Type != StepEnv && s.Type != StepArg && s.Args[0] == "") {
		return errdefs.Publicf(errdefs.ErrInvalid, "%s: wrong arguments %q", s.Type, s.Args)
	}
	return nil
}

// withLayer mounts the state's layers with a new upper directory, lets fn
// change the tree, and adds the upper directory as the state's new layer.
// With mb > 0 the upper directory lives on a scratch file system of mb
// MiB (sizedScratch), so that what fn runs cannot fill the host's disk.
func (b *Builder) withLayer(ctx context.Context, buildID, name string, ns *state, mb int64, fn func(root string) error) error {
	scratch, err := b.scratchDir("step-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(scratch)
	upperFS := scratch
	if mb > 0 {
		mp, release, err := b.sizedScratch(ctx, scratch, mb)
		if err != nil {
			return err
		}
		defer func() {
			if err := release(); err != nil {
				b.log.Warn("release build scratch; the next start's cleanup retries", "build_id", buildID, "error", err)
			}
		}()
		upperFS = mp
	}
	m, err := layer.MountOverlay(ns.Layers, upperFS)
	if err != nil {
		return err
	}
	ferr := fn(m.Merged)
	if err := m.Unmount(); err != nil {
		return err
	}
	if ferr != nil {
		if se, ok := errors.AsType[*StepError](ferr); ok && mb > 0 && full(upperFS) {
			se.Output = strings.TrimSpace(se.Output + fmt.Sprintf("\n(the step's scratch space of %d MiB, the template's disk size, is full)", mb))
		}
		return ferr
	}
	upper := m.Upper
	if mb > 0 {
		// Off the scratch file system, onto the data directory's.
		upper = filepath.Join(scratch, "layer")
		if err := copyOut(ctx, m.Upper, upper); err != nil {
			return err
		}
	}
	dst := b.layerDir(ns.Key)
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return err
	}
	if _, err := os.Stat(dst); err == nil {
		// A forced rebuild (or a concurrent build) made this layer before;
		// the old one moves to the scratch directory, removed with it.
		if err := os.Rename(dst, filepath.Join(scratch, "old")); err != nil {
			return err
		}
	}
	if err := os.Rename(upper, dst); err != nil {
		return err
	}
	b.addLayer(buildID, dst)
	ns.Layers = append(ns.Layers, dst)
	return nil
}

// scratchMB is the scratch space of a build's RUN steps and ready check:
// the template's disk size.
func (b *Builder) scratchMB(ctx context.Context, buildID string) (int64, error) {
	bd, err := b.cat.Build(ctx, buildID)
	if err != nil {
		return 0, err
	}
	if bd.DiskMB > 0 {
		return bd.DiskMB, nil
	}
	return templates.DefaultDiskMB, nil
}

// runEnv is the environment of a build process: the template's (image and
// ENV steps) through the one merge function, with ARG values and HOME and
// PATH defaults where the template sets none.
func runEnv(ns *state, home string) []string {
	env := templates.MergeEnv(ns.Env, nil, nil)
	for k, v := range ns.Args {
		if _, ok := env[k]; !ok {
			env[k] = v
		}
	}
	if _, ok := env["PATH"]; !ok {
		env["PATH"] = templates.DefaultPath
	}
	if _, ok := env["HOME"]; !ok && home != "" {
		env["HOME"] = home
	}
	return templates.EnvList(env)
}

// run executes a RUN step in a build sandbox over root.
func (b *Builder) run(ctx context.Context, buildID, name, root string, s Step, ns *state, bl *buildLog) error {
	user := ns.User
	if len(s.Args) > 1 && s.Args[1] != "" {
		user = s.Args[1]
	}
	u, err := lookupUser(root, user)
	if err != nil {
		return err
	}
	cwd := orRoot(ns.Workdir)
	if err := mkdirAllOwned(root, cwd, 0, 0); err != nil {
		return err
	}
	res, err := b.resources(ctx, buildID)
	if err != nil {
		return err
	}
	sb, err := b.cfg.Runner.Start(ctx, SandboxRequest{ID: "build-" + shortID(buildID) + "-" + name, RootFS: root, Network: b.cfg.Network, Resources: res})
	if err != nil {
		return fmt.Errorf("start build sandbox: %w", err)
	}
	defer sb.Stop(context.WithoutCancel(ctx))
	out := &lineWriter{bl: bl, step: name}
	runCtx, cancel := context.WithTimeout(ctx, b.cfg.StepTimeout)
	defer cancel()
	code, err := sb.Exec(runCtx, Process{
		Args: []string{"/bin/sh", "-c", s.Args[0]}, Env: runEnv(ns, u.Home), Cwd: cwd,
		UID: u.UID, GID: u.GID, Stdout: out, Stderr: out,
	})
	out.close()
	if err != nil {
		if ctx.Err() == nil && runCtx.Err() != nil {
			err = fmt.Errorf("did not finish within %s: %w", b.cfg.StepTimeout, errdefs.ErrExhausted)
		}
		return &StepError{Step: name, Command: describe(s), Err: err, Output: out.lastLines()}
	}
	if code != 0 {
		return &StepError{Step: name, Command: describe(s), ExitCode: code, Output: out.lastLines()}
	}
	return nil
}

// resources are a build sandbox's limits: the template's CPU and memory,
// with at least MinBuildMemoryMB of memory.
func (b *Builder) resources(ctx context.Context, buildID string) (sandbox.Resources, error) {
	bd, err := b.cat.Build(ctx, buildID)
	if err != nil {
		return sandbox.Resources{}, err
	}
	return sandbox.Resources{VCPUs: bd.CPUCount, MemoryMB: max(bd.MemoryMB, b.cfg.MinBuildMemoryMB), Pids: 4096}, nil
}

func shortID(id string) string {
	id = strings.ReplaceAll(id, "-", "")
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// finalize makes the template's default user exist: the last USER step's
// user, else the base template's, else `user` (created like E2B's, with
// passwordless sudo when sudo is installed).
func (b *Builder) finalize(ctx context.Context, buildID string, st *state, cached bool, bl *buildLog) (*state, error) {
	ns := st.clone()
	if !st.ExplicitUser {
		ns.User = templates.DefaultUser
	}
	key := hashKey(st.Key, "finalize", ns.User, ns.Workdir)
	if cached {
		if cs, ok := b.cacheLoad(key); ok {
			return cs, nil
		}
	}
	ns.Key = key
	err := b.withLayer(ctx, buildID, "finalize", ns, 0, func(root string) error {
		u, err := ensureUser(root, ns.User, !st.ExplicitUser)
		if err != nil {
			return err
		}
		if ns.Workdir == "" || ns.Workdir == "/" {
			ns.Workdir = orRoot(u.Home)
		}
		return mkdirAllOwned(root, ns.Workdir, u.UID, u.GID)
	})
	if err != nil {
		return nil, &StepError{Step: "finalize", Command: "default user " + ns.User, Err: err}
	}
	if err := b.cacheStore(ns); err != nil {
		b.log.Warn("store layer cache entry", "build_id", buildID, "error", err)
	}
	bl.add(templates.LogInfo, "finalize", fmt.Sprintf("Default user %s, working directory %s", ns.User, ns.Workdir))
	return ns, nil
}

// checkReady starts a sandbox of the finished root filesystem, runs the
// start command in the background and the ready command every
// ReadyInterval until it passes or ReadyTimeout ends.
func (b *Builder) checkReady(ctx context.Context, buildID, rootfs string, st *state, startCmd, readyCmd string, bl *buildLog) error {
	if readyCmd == "" {
		bl.add(templates.LogInfo, "ready", "No ready command: the start command runs when a sandbox starts")
		return nil
	}
	scratch, err := b.scratchDir("ready-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(scratch)
	mb, err := b.scratchMB(ctx, buildID)
	if err != nil {
		return err
	}
	upperFS, release, err := b.sizedScratch(ctx, scratch, mb)
	if err != nil {
		return &StepError{Step: "ready", Command: readyCmd, Err: err}
	}
	defer release()
	m, err := layer.MountOverlay([]string{rootfs}, upperFS)
	if err != nil {
		return &StepError{Step: "ready", Command: readyCmd, Err: err}
	}
	defer m.Unmount()
	u, err := lookupUser(m.Merged, st.User)
	if err != nil {
		return &StepError{Step: "ready", Command: readyCmd, Err: err}
	}
	res, err := b.resources(ctx, buildID)
	if err != nil {
		return err
	}
	sb, err := b.cfg.Runner.Start(ctx, SandboxRequest{ID: "build-" + shortID(buildID) + "-ready", RootFS: m.Merged, Network: b.cfg.Network, Resources: res})
	if err != nil {
		return &StepError{Step: "ready", Command: readyCmd, Err: err}
	}
	defer sb.Stop(context.WithoutCancel(ctx))
	env := runEnv(&state{Env: st.Env}, u.Home)
	if startCmd != "" {
		bl.add(templates.LogInfo, "start", "Start command: "+startCmd)
		out := &lineWriter{bl: bl, step: "start"}
		if err := sb.Spawn(ctx, Process{Args: []string{"/bin/sh", "-c", startCmd}, Env: env, Cwd: orRoot(st.Workdir), UID: u.UID, GID: u.GID, Stdout: out, Stderr: out}); err != nil {
			return &StepError{Step: "start", Command: startCmd, Err: err}
		}
	}
	bl.add(templates.LogInfo, "ready", "Waiting for ready command: "+readyCmd)
	deadline := time.Now().Add(b.cfg.ReadyTimeout)
	var last *lineWriter
	var lastCode int
	for {
		last = &lineWriter{bl: bl, step: "ready"}
		code, err := sb.Exec(ctx, Process{Args: []string{"/bin/sh", "-c", readyCmd}, Env: env, Cwd: orRoot(st.Workdir), UID: u.UID, GID: u.GID, Stdout: last, Stderr: last})
		last.close()
		if err != nil {
			return &StepError{Step: "ready", Command: readyCmd, Err: err}
		}
		if code == 0 {
			bl.add(templates.LogInfo, "ready", "Ready command passed")
			return nil
		}
		lastCode = code
		if time.Now().After(deadline) {
			return &StepError{Step: "ready", Command: readyCmd, ExitCode: lastCode, Output: "ready command did not pass within " + b.cfg.ReadyTimeout.String() + ": " + last.lastLines()}
		}
		t := time.NewTimer(b.cfg.ReadyInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// flattenLayers is layer.Flatten; a variable so tests can count calls.
var flattenLayers = layer.Flatten

// ValidateSteps checks the steps of a build as StartBuild does, for a
// build service that runs them elsewhere (internal/nodebuild).
func ValidateSteps(steps []Step) error {
	for i, st := range steps {
		if err := validateStep(st); err != nil {
			return fmt.Errorf("step %d: %w", i+1, err)
		}
	}
	return nil
}
