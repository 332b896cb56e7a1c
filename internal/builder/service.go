package builder

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/errdefs/errhttp"
	"github.com/warren-sandbox/warren/internal/templates"
)

// UploadPathPrefix is where Service.UploadHandler expects to be mounted:
// PUT UploadPathPrefix + "<templateID>/<hash>?token=..." with a gzip'd tar.
const UploadPathPrefix = "/builder/files/"

// ServiceConfig configures a Service.
type ServiceConfig struct {
	Builder *Builder
	Logger  *slog.Logger
	// UploadSecret signs upload URLs; random per process when empty (URLs
	// then end with the process, which the SDK's upload-then-build flow
	// does not notice).
	UploadSecret []byte
	// Builds bound the builds: how many run at once, one team's share of
	// them and its queue, steps per build, a build's time.
	Builds BuildLimits
	// MaxUploadBytes bounds one upload (default 4 GiB).
	MaxUploadBytes int64
	// MaxTeamUploads and MaxTeamUploadBytes bound the uploaded build
	// contexts a team keeps, over all its templates (default 1000 and
	// 16 GiB, as stored: gzip'd).
	MaxTeamUploads     int
	MaxTeamUploadBytes int64
	// MaxTemplateDiskMB is the largest disk size a template may ask for
	// (minFreeDiskMb; default 65536).
	MaxTemplateDiskMB int64
}

// Service is what the API server calls for E2B's template build API and
// what `warren template build` uses in process: create a build, start it,
// poll its status and logs, and take uploaded COPY contexts.
type Service struct {
	b      *Builder
	cat    *templates.Catalog
	log    *slog.Logger
	secret []byte
	maxUp  int64
	quota  uploadQuota
	limits BuildLimits
	queue  *buildQueue

	ctx    context.Context
	cancel context.CancelFunc
	mu     sync.Mutex
	done   map[string]chan struct{} // running builds
	wg     sync.WaitGroup
}

// NewService returns a Service running builds with cfg.Builder.
func NewService(cfg ServiceConfig) (*Service, error) {
	if cfg.Builder == nil {
		return nil, fmt.Errorf("build service: no builder: %w", errdefs.ErrInvalid)
	}
	if cfg.Logger == nil {
		cfg.Logger = cfg.Builder.log
	}
	if len(cfg.UploadSecret) == 0 {
		cfg.UploadSecret = make([]byte, 32)
		rand.Read(cfg.UploadSecret)
	}
	cfg.Builds = cfg.Builds.withDefaults()
	if cfg.MaxUploadBytes <= 0 {
		cfg.MaxUploadBytes = 4 << 30
	}
	if cfg.MaxTeamUploads <= 0 {
		cfg.MaxTeamUploads = 1000
	}
	if cfg.MaxTeamUploadBytes <= 0 {
		cfg.MaxTeamUploadBytes = 16 << 30
	}
	if cfg.MaxTemplateDiskMB <= 0 {
		cfg.MaxTemplateDiskMB = 64 << 10
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Service{
		b: cfg.Builder, cat: cfg.Builder.cat, log: cfg.Logger, secret: cfg.UploadSecret, maxUp: cfg.MaxUploadBytes,
		quota:  uploadQuota{files: cfg.MaxTeamUploads, bytes: cfg.MaxTeamUploadBytes, diskMB: cfg.MaxTemplateDiskMB},
		limits: cfg.Builds, queue: newBuildQueue(cfg.Builds.Slots, cfg.Builds.TeamQueue),
		ctx: ctx, cancel: cancel, done: map[string]chan struct{}{},
	}, nil
}

// Recover marks builds that a previous process left waiting or building
// as failed (their work died with that process), then removes what they
// left on disk: mounts and scratch files of crashed processes, partial
// cache entries and uploads, the files of failed builds (Builder.Cleanup).
// Call once at start, before builds are started.
func (s *Service) Recover(ctx context.Context) error {
	if err := s.failInterrupted(ctx); err != nil {
		return err
	}
	st, err := s.b.Cleanup(ctx)
	if st.Total() > 0 || st.Kept > 0 {
		s.log.Info("build leftovers of a previous run removed", "unmounted", st.Unmounted, "scratch_dirs", st.Sessions,
			"partial_files", st.Partials, "failed_build_dirs", st.BuildDirs, "kept", st.Kept)
	}
	if err != nil {
		// What is left costs disk space only; the next start tries again.
		s.log.Warn("some build leftovers could not be removed", "error", err)
	}
	return nil
}

// failInterrupted marks builds that are waiting or building, but not in
// this process, as failed.
func (s *Service) failInterrupted(ctx context.Context) error {
	all, err := s.cat.List(ctx, "")
	if err != nil {
		return err
	}
	for _, t := range all {
		builds, err := s.cat.Builds(ctx, t.ID)
		if err != nil {
			return err
		}
		for _, b := range builds {
			if b.Status != templates.BuildBuilding && b.Status != templates.BuildWaiting {
				continue
			}
			s.mu.Lock()
			_, running := s.done[b.ID]
			s.mu.Unlock()
			if running {
				continue
			}
			if _, err := s.cat.FinishBuild(ctx, b.ID, &templates.Reason{Message: "the build was interrupted by a restart of Warren"}); err != nil {
				return err
			}
			s.log.Info("build interrupted by restart", "template_id", t.ID, "build_id", b.ID)
		}
	}
	return nil
}

// Close cancels running builds, waits for them to record their end, and
// closes the builder (its scratch session).
func (s *Service) Close() {
	s.cancel()
	s.wg.Wait()
	if err := s.b.Close(); err != nil {
		s.log.Warn("close builder", "error", err)
	}
}

// CreateTemplate makes a waiting build (POST /v3/templates).
func (s *Service) CreateTemplate(ctx context.Context, req templates.CreateRequest) (*templates.Template, *templates.Build, error) {
	if err := s.checkDisk(req); err != nil {
		return nil, nil, err
	}
	return s.cat.CreateBuild(ctx, req)
}

// StartRequest starts a build (POST /v2/templates/{id}/builds/{buildID}).
type StartRequest struct {
	TeamID     string
	TemplateID string
	// BuildID is the waiting build made by CreateTemplate; when empty a
	// new build is made from Create (the CLI's one-call path).
	BuildID string
	Create  templates.CreateRequest
	Spec    Spec
}

// StartBuild validates req and starts the build in the background; it
// returns the build's ID at once. Poll Status, or Wait.
func (s *Service) StartBuild(ctx context.Context, req StartRequest) (string, error) {
	t, _, err := WaitingBuild(ctx, s.cat, &req, s.CreateTemplate)
	if err != nil {
		return "", err
	}
	if err := CheckStorage(ctx, s.cat, req.TeamID, req.Spec.Team.StorageMB, 0); err != nil {
		return "", err
	}
	if n := len(req.Spec.Steps); n > s.limits.MaxSteps {
		return "", errdefs.Publicf(errdefs.ErrInvalid, "the build has %d steps, more than this server allows (%d steps)", n, s.limits.MaxSteps)
	}
	for i, st := range req.Spec.Steps {
		if err := validateStep(st); err != nil {
			return "", errdefs.Wrapf(err, "step %d", i+1)
		}
		if st.FilesHash != "" {
			p, err := s.b.filesPath(t.ID, st.FilesHash)
			if err != nil {
				return "", err
			}
			if _, err := os.Stat(p); err != nil {
				return "", errdefs.Publicf(errdefs.ErrInvalid, "step %d: files %s were not uploaded", i+1, st.FilesHash)
			}
		}
	}
	req.Spec.TeamID = req.TeamID
	share := req.Spec.Team.Builds
	if share <= 0 {
		share = s.limits.TeamBuilds
	}
	done := make(chan struct{})
	s.mu.Lock()
	if _, ok := s.done[req.BuildID]; ok {
		s.mu.Unlock()
		return "", errdefs.Publicf(errdefs.ErrConflict, "build %q is already running", req.BuildID)
	}
	tk, err := s.queue.enqueue(req.TeamID, share)
	if err != nil {
		s.mu.Unlock()
		return "", err
	}
	s.done[req.BuildID] = done
	s.mu.Unlock()
	s.wg.Go(func() {
		defer func() {
			s.mu.Lock()
			delete(s.done, req.BuildID)
			s.mu.Unlock()
			close(done)
		}()
		log := s.log.With("template_id", t.ID, "build_id", req.BuildID, "team_id", req.TeamID)
		select {
		case <-tk.granted:
		default:
			// Said in the build's log, which its team reads; what other
			// teams run is not.
			msg := fmt.Sprintf("Waiting for a build slot (this server runs %d builds at once, %d of one team)", s.limits.Slots, share)
			if err := s.cat.Store().AppendLogs(s.ctx, req.BuildID, templates.LogEntry{Timestamp: time.Now().UTC(), Level: templates.LogInfo, Message: msg}); err != nil {
				log.Warn("build log", "error", err)
			}
		}
		if err := s.queue.wait(s.ctx, tk); err != nil {
			s.cat.FinishBuild(context.Background(), req.BuildID, &templates.Reason{Message: "Warren is shutting down"})
			return
		}
		defer s.queue.release(req.TeamID)
		ctx, cancel := context.WithTimeoutCause(s.ctx, s.limits.BuildTimeout, buildTimeoutError{s.limits.BuildTimeout})
		defer cancel()
		log.Info("build started")
		if err := s.b.Build(ctx, req.BuildID, req.Spec); err != nil {
			log.Info("build failed", "error", err)
			return
		}
		log.Info("build ready")
	})
	return req.BuildID, nil
}

// Wait blocks until the build is no longer running in this process (or
// ctx ends) and returns its record.
func (s *Service) Wait(ctx context.Context, buildID string) (*templates.Build, error) {
	s.mu.Lock()
	done, ok := s.done[buildID]
	s.mu.Unlock()
	if ok {
		select {
		case <-done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return s.cat.Build(ctx, buildID)
}

func (s *Service) owned(ctx context.Context, teamID, templateID string) (*templates.Template, error) {
	return OwnedTemplate(ctx, s.cat, teamID, templateID)
}

// Status is a build's state with its log entries from an offset
// (GET /templates/{id}/builds/{buildID}/status?logsOffset=N).
type Status struct {
	TemplateID string
	BuildID    string
	Status     templates.BuildStatus
	// LogEntries is never nil (the SDK maps it unconditionally).
	LogEntries []templates.LogEntry
	Reason     *templates.Reason
}

// Status reports a build of team's template with the log entries from
// logsOffset on.
func (s *Service) Status(ctx context.Context, teamID, templateID, buildID string, logsOffset int) (*Status, error) {
	return BuildStatus(ctx, s.cat, teamID, templateID, buildID, logsOffset)
}

// Files answers GET /templates/{id}/files/{hash}: whether the COPY context
// with hash is already stored for team's template, and if not the path
// (under UploadPathPrefix, signed) to PUT it to.
func (s *Service) Files(ctx context.Context, teamID, templateID, hash string) (present bool, uploadPath string, err error) {
	t, err := s.owned(ctx, teamID, templateID)
	if err != nil {
		return false, "", err
	}
	p, err := s.b.filesPath(t.ID, hash)
	if err != nil {
		return false, "", err
	}
	if _, err := os.Stat(p); err == nil {
		return true, "", nil
	}
	if err := s.checkUploads(ctx, teamID); err != nil {
		return false, "", err
	}
	return false, UploadPathPrefix + t.ID + "/" + hash + "?token=" + s.token(t.ID, hash), nil
}

func (s *Service) token(templateID, hash string) string {
	m := hmac.New(sha256.New, s.secret)
	m.Write([]byte(templateID + "/" + hash))
	return hex.EncodeToString(m.Sum(nil))
}

// UploadHandler takes PUTs of tars (gzip'd or not) at the paths Files
// hands out.
// The token in the path authenticates the request; mount it without API
// key checks at UploadPathPrefix. Its errors are answered with a line of
// text (the SDK's upload reads no JSON), their status from errhttp's
// table: the message one chosen where the error was made (the team's
// quota), else "upload failed"; the error goes to the log.
func (s *Service) UploadHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		err := s.upload(w, r)
		if err == nil {
			w.WriteHeader(http.StatusCreated)
			return
		}
		he := errhttp.From(err)
		for k, v := range he.Header {
			w.Header()[k] = v
		}
		http.Error(w, he.Msg, he.Code)
	})
}

// upload stores the body of an upload request, or returns what its client
// is told.
func (s *Service) upload(w http.ResponseWriter, r *http.Request) error {
	if r.Method != http.MethodPut {
		return &errhttp.HTTPError{Code: http.StatusMethodNotAllowed, Msg: "method not allowed", Header: http.Header{"Allow": {http.MethodPut}}}
	}
	rest := strings.TrimPrefix(r.URL.Path, UploadPathPrefix)
	templateID, hash, ok := strings.Cut(rest, "/")
	if !ok || !hmac.Equal([]byte(r.URL.Query().Get("token")), []byte(s.token(templateID, hash))) {
		return errhttp.Errorf(http.StatusForbidden, "invalid upload URL")
	}
	tooLarge := errhttp.Errorf(http.StatusRequestEntityTooLarge, "upload larger than %d bytes", s.maxUp)
	if r.ContentLength > s.maxUp {
		return tooLarge
	}
	err := s.PutFilesSized(r.Context(), templateID, hash, http.MaxBytesReader(w, r.Body, s.maxUp), r.ContentLength)
	if err == nil {
		return nil
	}
	s.log.Warn("file upload", "template_id", templateID, "hash", hash, "error", err)
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		tooLarge.Err = err
		return tooLarge
	}
	if _, public := errdefs.Message(err); !public {
		return errdefs.WithMessage(err, "upload failed")
	}
	return err
}

// PutFiles stores a gzip'd or plain tar as the COPY context hash of a
// template, of a size not known in advance.
func (s *Service) PutFiles(ctx context.Context, templateID, hash string, r io.Reader) error {
	return s.PutFilesSized(ctx, templateID, hash, r, -1)
}

// PutFilesSized is PutFiles of an upload that declared its size (a
// Content-Length; -1 when unknown). The upload holds its team's quota
// from the start, for the declared size, and as it streams, for what it
// wrote: past the quota it fails (ErrExhausted) before the bytes reach
// the disk, so parallel uploads of one team never hold more than its
// quota.
func (s *Service) PutFilesSized(ctx context.Context, templateID, hash string, r io.Reader, declared int64) error {
	p, err := s.b.filesPath(templateID, hash)
	if err != nil {
		return err
	}
	t, err := s.cat.Store().GetTemplate(ctx, templateID)
	if err != nil {
		return fmt.Errorf("template %q: %w", templateID, err)
	}
	res, err := s.reserve(ctx, t.TeamID, declared)
	if err != nil {
		return fmt.Errorf("files %s: %w", hash, err)
	}
	defer res.release(nil) // nothing to commit
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	// Written in the builder's scratch session, renamed into place
	// complete: a crash mid-upload leaves nothing in files/.
	f, err := s.b.scratchFile("upload-")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	out := &quotaWriter{ctx: ctx, w: f, r: res}
	// The SDK sends a gzip'd tar, or a plain one for a COPY with
	// gzip: false; the store keeps gzip'd tars only.
	head := make([]byte, 512)
	n, err := io.ReadFull(r, head)
	head = head[:n]
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		f.Close()
		return fmt.Errorf("files %s: %w", hash, err)
	}
	body := io.MultiReader(bytes.NewReader(head), r)
	switch {
	case bytes.HasPrefix(head, []byte{0x1f, 0x8b}):
		_, err = io.Copy(out, body)
	case n == 512 && string(head[257:262]) == "ustar":
		zw := gzip.NewWriter(out)
		if _, err = io.Copy(zw, body); err == nil {
			err = zw.Close()
		}
	default:
		f.Close()
		return fmt.Errorf("files %s: the upload is neither a gzip'd tar nor a tar: %w", hash, errdefs.ErrInvalid)
	}
	if err != nil {
		f.Close()
		return fmt.Errorf("files %s: %w", hash, err)
	}
	if err := f.Close(); err != nil {
		return err
	}
	// Stored as the reservation ends, under the quota's lock: the bytes
	// count as held, then as stored, never as neither.
	return res.release(func() error { return os.Rename(f.Name(), p) })
}

// filesPath is where the COPY context hash of a template is stored.
func (b *Builder) filesPath(templateID, hash string) (string, error) {
	if !safeName(templateID) || !safeName(hash) {
		return "", errdefs.Publicf(errdefs.ErrInvalid, "files %q of template %q: bad name", hash, templateID)
	}
	return filepath.Join(b.cfg.DataDir, "files", templateID, hash+".tar.gz"), nil
}

func safeName(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

// LogsQuery selects build log entries (GET
// /templates/{id}/builds/{buildID}/logs).
type LogsQuery struct {
	// Cursor, when set, is the first timestamp returned (forward) or the
	// last (backward).
	Cursor time.Time
	// Limit bounds the entries returned (100 when 0 or more).
	Limit int
	// Backward returns the newest entries first.
	Backward bool
	// MinLevel drops entries below it (debug < info < warn < error).
	MinLevel templates.LogLevel
}

var levelRank = map[templates.LogLevel]int{templates.LogDebug: 0, templates.LogInfo: 1, templates.LogWarn: 2, templates.LogError: 3}

// Logs returns a build's log entries selected by q.
func (s *Service) Logs(ctx context.Context, teamID, templateID, buildID string, q LogsQuery) ([]templates.LogEntry, error) {
	return BuildLogs(ctx, s.cat, teamID, templateID, buildID, q)
}

// SelectLogs returns the entries of a build's log that q selects.
func SelectLogs(entries []templates.LogEntry, q LogsQuery) []templates.LogEntry {
	if q.Limit <= 0 || q.Limit > 100 {
		q.Limit = 100
	}
	if q.Backward {
		entries = slices.Clone(entries)
		slices.Reverse(entries)
	}
	out := []templates.LogEntry{}
	for _, e := range entries {
		if q.MinLevel != "" && levelRank[e.Level] < levelRank[q.MinLevel] {
			continue
		}
		if !q.Cursor.IsZero() && ((!q.Backward && e.Timestamp.Before(q.Cursor)) || (q.Backward && e.Timestamp.After(q.Cursor))) {
			continue
		}
		out = append(out, e)
		if len(out) == q.Limit {
			break
		}
	}
	return out
}
