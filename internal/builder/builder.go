// Package builder is Warren's template build engine. A build starts from a
// base (an image from any OCI registry, flattened to a root filesystem, or
// another template's build) and applies steps — RUN, COPY/ADD, ENV/ARG,
// WORKDIR, USER — each as one layer: an overlay upper directory over the
// layers below, cached under a key that hashes the previous key, the step
// and its files. A build then checks its start and ready commands and
// flattens its layers into the build's root filesystem in the template
// catalog (internal/templates).
//
// RUN steps and the start/ready commands execute in build sandboxes from a
// Runner. Steps come from the E2B build API (Service) or from a Dockerfile
// (ParseDockerfile). Build logs are entries (timestamp, level, message,
// step) stored with the build, read with an offset as E2B's status polling
// does.
package builder

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/warren-sandbox/warren/internal/egress"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/node/layer"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/templates"
)

// Step types.
const (
	StepRun     = "RUN"
	StepCopy    = "COPY"
	StepAdd     = "ADD"
	StepEnv     = "ENV"
	StepArg     = "ARG"
	StepWorkdir = "WORKDIR"
	StepUser    = "USER"
)

// Step is one build step with E2B's argument layout:
//
//	RUN     [cmd] or [cmd, user]
//	COPY    [src, dest, user|"", mode-octal|""]   (ADD alike)
//	ENV     [k1, v1, k2, v2, ...]
//	ARG     [name, value]                          (build-time only)
//	WORKDIR [dir]
//	USER    [user]
type Step struct {
	Type string   `json:"type"`
	Args []string `json:"args"`
	// Force rebuilds this step (and so every later one) without the cache.
	Force bool `json:"force,omitempty"`
	// FilesHash names the uploaded context of a COPY step (Service.PutFiles).
	FilesHash string `json:"filesHash,omitempty"`
	// Expand asks for Dockerfile variable expansion of the arguments when
	// the step runs (steps from ParseDockerfile).
	Expand bool `json:"expand,omitempty"`
}

// Spec is what to build.
type Spec struct {
	// FromImage is an image reference ("python:3.12", "reg:5000/x/y:t");
	// FromTemplate is a template "alias[:tag]" or ID. Exactly one is set;
	// neither means the base template.
	FromImage    string        `json:"fromImage,omitempty"`
	FromTemplate string        `json:"fromTemplate,omitempty"`
	RegistryAuth *RegistryAuth `json:"-"`
	Steps        []Step        `json:"steps"`
	StartCmd     string        `json:"startCmd,omitempty"`
	ReadyCmd     string        `json:"readyCmd,omitempty"`
	// Force skips the layer cache for the whole build.
	Force bool `json:"force,omitempty"`
	// ContextDir holds COPY sources for steps without FilesHash
	// (Dockerfile builds).
	ContextDir string `json:"-"`
	// TeamID is whose templates FromTemplate may name.
	TeamID string `json:"-"`
	// Team is the team's share of the build service (its limits, set by
	// the control plane, never from a tenant's request).
	Team TeamLimits `json:"team"`
}

// TeamLimits are the limits of a build's team that the build service
// enforces; zero fields take the service's defaults (none for storage).
type TeamLimits struct {
	// Builds is how many of the team's builds run at once (its share of
	// the build slots; BuildLimits.TeamBuilds when 0).
	Builds int `json:"builds,omitempty"`
	// StorageMB bounds the disk the team's templates take
	// (templates.Catalog.TeamDiskBytes): a build does not start at the
	// bound and fails when it ends over it.
	StorageMB int64 `json:"storageMB,omitempty"`
}

// Config configures a Builder.
type Config struct {
	// DataDir holds the layer cache (layers/), uploaded files (files/) and
	// scratch space (work/, one locked session per Builder: see Cleanup);
	// on the same file system as the catalog.
	DataDir string
	Catalog *templates.Catalog
	Runner  Runner
	Logger  *slog.Logger
	// InsecureRegistries are registry hosts reached over plain HTTP
	// (loopback and RFC 1918 addresses already are).
	InsecureRegistries []string
	// Transport carries registry traffic (pulls, token and redirect
	// hops). Default: egress's guarded dialer with
	// no exceptions, which reaches public addresses only (a tenant names
	// the registry).
	Transport http.RoundTripper
	// ReadyTimeout bounds the wait for the ready command (10 min by
	// default); ReadyInterval is the pause between tries (2 s).
	ReadyTimeout  time.Duration
	ReadyInterval time.Duration
	// Network gives RUN steps outbound network access (true in serve).
	Network bool
	// StepTimeout bounds one RUN step (default DefaultStepTimeout).
	StepTimeout time.Duration
	// MinBuildMemoryMB is the least memory a build sandbox gets, whatever
	// the template's own size (default 1024; package installs need room).
	MinBuildMemoryMB int64
	// Snapshotter, when set, takes the snapshot on ready of builds with a
	// start command; without it (or when it fails) sandboxes of the
	// template cold-start and run the start command.
	Snapshotter Snapshotter
	// Limits bounds what a tenant's build may unpack and log.
	Limits Limits
	// Mkfs is the mkfs.ext4 binary of the scratch file systems of RUN
	// steps (default "mkfs.ext4" on PATH).
	Mkfs string
}

// Limits bound what one build may unpack and log; zero fields take the
// defaults (DefaultLimits).
type Limits struct {
	// ContextBytes and ContextEntries bound one uploaded build context
	// as unpacked (file content, tar entries).
	ContextBytes   int64
	ContextEntries int64
	// ImageBytes and ImageEntries bound a base image as unpacked.
	ImageBytes   int64
	ImageEntries int64
	// LogLines and LogBytes bound the log entries stored for one build;
	// the rest is dropped, with one entry saying so.
	LogLines int
	LogBytes int64
}

// DefaultLimits are the limits of a Builder whose Config leaves them 0.
var DefaultLimits = Limits{
	ContextBytes: 8 << 30, ContextEntries: 1 << 20,
	ImageBytes: 64 << 30, ImageEntries: 4 << 20,
	LogLines: 20000, LogBytes: 8 << 20,
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits
	for _, f := range []struct{ v, def *int64 }{
		{&l.ContextBytes, &d.ContextBytes}, {&l.ContextEntries, &d.ContextEntries},
		{&l.ImageBytes, &d.ImageBytes}, {&l.ImageEntries, &d.ImageEntries}, {&l.LogBytes, &d.LogBytes},
	} {
		if *f.v <= 0 {
			*f.v = *f.def
		}
	}
	if l.LogLines <= 0 {
		l.LogLines = d.LogLines
	}
	return l
}

// contextLimits are the unpack options of an uploaded build context: a
// tenant's tar.
func (b *Builder) contextLimits() layer.Options {
	l := b.cfg.Limits
	return layer.Options{MaxBytes: l.ContextBytes, MaxEntries: l.ContextEntries, What: "of an uploaded build context", Untrusted: true}
}

// imageLimits are the unpack options of a base image.
func (b *Builder) imageLimits() layer.Options {
	l := b.cfg.Limits
	return layer.Options{MaxBytes: l.ImageBytes, MaxEntries: l.ImageEntries, What: "of a base image"}
}

// Snapshotter makes the memory snapshot of a finished build ("snapshot on
// ready"): it starts a sandbox of t in the node's runtime, lets its start
// command run, retries readyCmd until it passes, and checkpoints the
// sandbox into dir. The node agent implements it (runsc checkpoint); a
// driver that cannot checkpoint returns errdefs.ErrUnsupported.
type Snapshotter interface {
	Snapshot(ctx context.Context, t nodeapi.Template, readyCmd string, dir string) error
}

// Builder runs builds. It is safe for concurrent use; builds of the same
// layers share the cache.
type Builder struct {
	cfg Config
	cat *templates.Catalog
	log *slog.Logger
	// cacheMu: builds hold it shared, PruneCache and Cleanup exclusively.
	cacheMu sync.RWMutex
	// sess is the scratch session (cleanup.go); nil once closed.
	sessMu sync.Mutex
	sess   *session
	// pins: what builds in progress read outside their build directory
	// (gc_pins.go), for the collector.
	pins pins
	// layers are the layer cache entries each build in progress made
	// (storage.go).
	layersMu sync.Mutex
	layers   map[string][]string
}

// New returns a Builder.
func New(cfg Config) (*Builder, error) {
	if cfg.DataDir == "" || cfg.Catalog == nil || cfg.Runner == nil {
		return nil, fmt.Errorf("builder: DataDir, Catalog and Runner are required: %w", errdefs.ErrInvalid)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.ReadyTimeout <= 0 {
		cfg.ReadyTimeout = 10 * time.Minute
	}
	if cfg.ReadyInterval <= 0 {
		cfg.ReadyInterval = 2 * time.Second
	}
	if cfg.StepTimeout <= 0 {
		cfg.StepTimeout = DefaultStepTimeout
	}
	if cfg.MinBuildMemoryMB <= 0 {
		cfg.MinBuildMemoryMB = 1024
	}
	cfg.Limits = cfg.Limits.withDefaults()
	if cfg.Transport == nil {
		cfg.Transport = (&egress.Dialer{}).Transport()
	}
	for _, d := range []string{"layers", "files", "work"} {
		if err := os.MkdirAll(filepath.Join(cfg.DataDir, d), 0o700); err != nil {
			return nil, fmt.Errorf("builder: %w", err)
		}
	}
	sess, err := openSession(filepath.Join(cfg.DataDir, "work"))
	if err != nil {
		return nil, err
	}
	return &Builder{cfg: cfg, cat: cfg.Catalog, log: cfg.Logger, sess: sess}, nil
}

// StepError is a failed build step: which, its output's tail and exit code.
type StepError struct {
	Step     string // "1", "2", ... or "base", "ready", "finalize"
	Command  string
	ExitCode int
	Output   string
	Err      error
}

func (e *StepError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("step %s (%s): %v", e.Step, e.Command, e.Err)
	}
	msg := fmt.Sprintf("step %s (%s) failed with exit code %d", e.Step, e.Command, e.ExitCode)
	if e.Output != "" {
		msg += ": " + e.Output
	}
	return msg
}

func (e *StepError) Unwrap() error { return e.Err }

// state is the build's position after a step.
type state struct {
	Key     string            `json:"key"`
	Layers  []string          `json:"layers"` // layer directories, bottom first
	Env     map[string]string `json:"env"`
	Args    map[string]string `json:"args,omitempty"`
	User    string            `json:"user"`
	Workdir string            `json:"workdir"`
	Cmd     []string          `json:"cmd,omitempty"`
	// ExplicitUser is set once a USER step ran.
	ExplicitUser bool `json:"explicitUser,omitempty"`
}

func (s *state) clone() *state {
	c := *s
	c.Layers = append([]string(nil), s.Layers...)
	c.Env = templates.MergeEnv(s.Env, nil, nil)
	c.Args = templates.MergeEnv(s.Args, nil, nil)
	c.Cmd = append([]string(nil), s.Cmd...)
	return &c
}

func hashKey(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		fmt.Fprintf(h, "%d:%s\n", len(p), p)
	}
	return hex.EncodeToString(h.Sum(nil))[:40]
}

// Build runs spec as the build buildID of the catalog: it marks the build
// building, runs every step, and finishes it ready or failed (with the
// failing step, its output and exit code as the reason). The returned
// error is the build's failure, if any.
func (b *Builder) Build(ctx context.Context, buildID string, spec Spec) (err error) {
	b.cacheMu.RLock()
	defer b.cacheMu.RUnlock()
	bl := b.newBuildLog(buildID)
	started, err := b.cat.UpdateBuild(ctx, buildID, func(bd *templates.Build) error {
		bd.Status = templates.BuildBuilding
		bd.StartCmd, bd.ReadyCmd = spec.StartCmd, spec.ReadyCmd
		return nil
	})
	if err != nil {
		return err
	}
	// The template's uploaded files and the trees of the base (pinned in
	// base) stay while the build runs, whatever happens to their templates.
	defer b.pinTemplate(started.TemplateID)()
	var unpinBase func()
	defer func() {
		if unpinBase != nil {
			unpinBase()
		}
	}()
	start := time.Now()
	defer func() {
		// What the build takes on disk counts against its team's storage.
		b.recordBytes(context.WithoutCancel(ctx), buildID, b.buildBytes(buildID, b.takeLayers(buildID), err == nil))
		var reason *templates.Reason
		if err != nil {
			reason = &templates.Reason{Message: err.Error()}
			var se *StepError
			if errors.As(err, &se) {
				reason.Step = se.Step
			}
			// Past the build time limit (Service), what failed was the
			// limit, whichever step it stopped.
			if cause := context.Cause(ctx); ctx.Err() != nil && errors.Is(cause, errBuildTimeout) {
				reason.Message = cause.Error()
				err = fmt.Errorf("%w: %w", cause, err)
			}
			bl.final(templates.LogError, reason.Step, "Build failed: "+err.Error())
		} else {
			bl.final(templates.LogInfo, "", fmt.Sprintf("Build finished in %s", time.Since(start).Round(time.Millisecond)))
		}
		bl.flush()
		if _, ferr := b.cat.FinishBuild(context.WithoutCancel(ctx), buildID, reason); ferr != nil {
			b.log.Error("record build result", "build_id", buildID, "error", ferr)
		}
	}()
	bl.add(templates.LogInfo, "", "Building template (build "+buildID+")")

	st, unpinBase, err := b.base(ctx, spec, bl)
	if err != nil {
		return err
	}
	// The layer cache is the team's own: a step's key starts from the
	// team, so no build of another team (whatever it sends) can hit, or
	// plant, an entry this build will use. Pulled images stay shared:
	// their key is the registry's content digest.
	st.Key = hashKey(st.Key, "team", spec.TeamID)
	cached := !spec.Force
	for i, step := range spec.Steps {
		name := fmt.Sprint(i + 1)
		if step.Force {
			cached = false
		}
		st, cached, err = b.step(ctx, buildID, name, step, st, spec, cached, bl)
		if err != nil {
			return err
		}
	}
	st, err = b.finalize(ctx, buildID, st, cached, bl)
	if err != nil {
		return err
	}
	rootfs := filepath.Join(b.cat.BuildDir(buildID), "rootfs")
	if err := b.flatten(ctx, st.Layers, rootfs); err != nil {
		return &StepError{Step: "finalize", Command: "flatten layers", Err: err}
	}
	// The base image's CMD is not a start command (python:3.12 would start
	// a REPL in every sandbox); a Dockerfile's own CMD is (ParseDockerfile).
	startCmd := spec.StartCmd
	if startCmd != "" || spec.ReadyCmd != "" {
		if err := b.checkReady(ctx, buildID, rootfs, st, startCmd, spec.ReadyCmd, bl); err != nil {
			return err
		}
	}
	bd, err := b.cat.UpdateBuild(ctx, buildID, func(bd *templates.Build) error {
		bd.RootFSDir = rootfs
		bd.Env = st.Env
		bd.User = st.User
		bd.Workdir = st.Workdir
		bd.StartCmd = startCmd
		return nil
	})
	if err != nil {
		return err
	}
	switch {
	case startCmd == "":
	case b.cfg.Snapshotter != nil:
		b.snapshot(ctx, bd, bl)
	default:
		bl.add(templates.LogInfo, "snapshot", "No snapshot on ready in this set-up: sandboxes of this template cold-start and run the start command")
	}
	if err := CheckStorage(ctx, b.cat, spec.TeamID, spec.Team.StorageMB, b.buildBytes(buildID, b.layersOf(buildID), true)); err != nil {
		return &StepError{Step: "finalize", Command: "template storage", Err: err}
	}
	return nil
}

// snapshot takes the build's snapshot on ready; failing that, the build
// stays usable by cold start.
func (b *Builder) snapshot(ctx context.Context, bd *templates.Build, bl *buildLog) {
	dir := filepath.Join(b.cat.BuildDir(bd.ID), "snapshot")
	bl.add(templates.LogInfo, "snapshot", "Taking the snapshot on ready")
	nt := bd.NodeTemplate()
	if err := b.cfg.Snapshotter.Snapshot(ctx, nt, bd.ReadyCmd, dir); err != nil {
		os.RemoveAll(dir)
		bl.add(templates.LogWarn, "snapshot", "No snapshot ("+err.Error()+"): sandboxes of this template cold-start")
		return
	}
	if _, err := b.cat.UpdateBuild(ctx, bd.ID, func(x *templates.Build) error { x.SnapshotDir = dir; return nil }); err != nil {
		bl.add(templates.LogWarn, "snapshot", "Snapshot not recorded: "+err.Error())
		return
	}
	bl.add(templates.LogInfo, "snapshot", "Snapshot taken: sandboxes of this template restore it")
}

// flatten writes the merged layers to dst atomically.
func (b *Builder) flatten(ctx context.Context, layers []string, dst string) error {
	tmp := dst + ".partial"
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return err
	}
	if err := flattenLayers(ctx, layers, tmp); err != nil {
		os.RemoveAll(tmp)
		return err
	}
	if err := os.RemoveAll(dst); err != nil {
		return err
	}
	return os.Rename(tmp, dst)
}

// buildLog collects a build's log entries and stores them, up to the
// build's log limits: past them entries are dropped, with one entry
// saying so and, at the end, how much was dropped.
type buildLog struct {
	mu       sync.Mutex
	store    templates.Store
	buildID  string
	log      *slog.Logger
	pending  []templates.LogEntry
	maxLines int
	maxBytes int64
	lines    int
	bytes    int64
	dropped  int
	dropB    int64
}

func (b *Builder) newBuildLog(buildID string) *buildLog {
	return &buildLog{store: b.cat.Store(), buildID: buildID, log: b.log, maxLines: b.cfg.Limits.LogLines, maxBytes: b.cfg.Limits.LogBytes}
}

func (l *buildLog) add(level templates.LogLevel, step, msg string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dropped > 0 || (l.maxLines > 0 && l.lines >= l.maxLines) || (l.maxBytes > 0 && l.bytes+int64(len(msg)) > l.maxBytes) {
		if l.dropped == 0 {
			l.appendLocked(templates.LogWarn, step, fmt.Sprintf("Build log limit reached (%d lines, %d bytes): later output is dropped", l.maxLines, l.maxBytes))
		}
		l.dropped++
		l.dropB += int64(len(msg))
		return
	}
	l.lines++
	l.bytes += int64(len(msg))
	l.appendLocked(level, step, msg)
}

// final adds the build's last entry (its result), past the limits: with
// a note of what was dropped first.
func (l *buildLog) final(level templates.LogLevel, step, msg string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dropped > 0 {
		l.appendLocked(templates.LogWarn, "", fmt.Sprintf("%d log lines (%d bytes) were dropped past the build's log limit", l.dropped, l.dropB))
	}
	l.appendLocked(level, step, msg)
}

func (l *buildLog) appendLocked(level templates.LogLevel, step, msg string) {
	l.pending = append(l.pending, templates.LogEntry{Timestamp: time.Now().UTC(), Level: level, Message: msg, Step: step})
	l.flushLocked()
}

func (l *buildLog) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.flushLocked()
}

func (l *buildLog) flushLocked() {
	if len(l.pending) == 0 {
		return
	}
	if err := l.store.AppendLogs(context.Background(), l.buildID, l.pending...); err != nil {
		l.log.Warn("store build log", "build_id", l.buildID, "error", err)
	}
	l.pending = l.pending[:0]
}

// lineWriter turns a process's output into log entries, one a line, and
// keeps the last lines for a failure's reason.
type lineWriter struct {
	bl   *buildLog
	step string
	buf  []byte
	tail []string
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	for {
		i := strings.IndexByte(string(w.buf), '\n')
		if i < 0 {
			if len(w.buf) > 8192 {
				w.line(string(w.buf))
				w.buf = w.buf[:0]
			}
			return len(p), nil
		}
		w.line(string(w.buf[:i]))
		w.buf = w.buf[i+1:]
	}
}

func (w *lineWriter) line(s string) {
	s = strings.TrimRight(s, "\r")
	w.bl.add(templates.LogInfo, w.step, s)
	w.tail = append(w.tail, s)
	if len(w.tail) > 10 {
		w.tail = w.tail[1:]
	}
}

func (w *lineWriter) close() {
	if len(w.buf) > 0 {
		w.line(string(w.buf))
		w.buf = nil
	}
}

func (w *lineWriter) lastLines() string { return strings.Join(w.tail, "\n") }

// shellJoin renders argv as one shell command line.
func shellJoin(argv []string) string {
	out := make([]string, len(argv))
	for i, a := range argv {
		if a != "" && !strings.ContainsAny(a, " \t\n'\"\\$`*?[]{}()<>|&;#~!") {
			out[i] = a
			continue
		}
		out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(out, " ")
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
