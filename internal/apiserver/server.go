// Package apiserver is Warren's E2B-compatible REST API: sandbox endpoints
// (create, list, get, kill, timeout, refresh, connect, pause, resume,
// metrics, logs, fork, network), teams and API keys, an admin token and
// per-team limits; E2B's template build API and sandbox snapshots when a
// build service and catalog are configured.
//
// Wire conventions (docs/api.md, "Conventions"): every error body is
// {"code": <HTTP status>, "message": "..."}; empty successes are 204;
// unknown JSON fields are accepted and invalid values are rejected with a
// message naming the field. Lifecycle work is delegated to
// internal/lifecycle; templates are resolved through TemplateResolver.
package apiserver

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warren-sandbox/warren/internal/builder"
	"github.com/warren-sandbox/warren/internal/cors"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/errdefs/errhttp"
	"github.com/warren-sandbox/warren/internal/lifecycle"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/sandbox"
	"github.com/warren-sandbox/warren/internal/secrets"
	"github.com/warren-sandbox/warren/internal/store"
	"github.com/warren-sandbox/warren/internal/templates"
	"github.com/warren-sandbox/warren/internal/throttle"
	"github.com/warren-sandbox/warren/internal/volumes"
)

// TemplateResolver turns a template ID or alias, as a team sees it, into
// what a node needs to start a sandbox. templates.Catalog implements it.
type TemplateResolver interface {
	Resolve(ctx context.Context, teamID, ref string) (nodeapi.Template, error)
}

// BuildService runs template builds: builder.Service on this machine,
// nodebuild.Remote on the nodes of warren api.
type BuildService interface {
	CreateTemplate(ctx context.Context, req templates.CreateRequest) (*templates.Template, *templates.Build, error)
	Files(ctx context.Context, teamID, templateID, hash string) (present bool, uploadPath string, err error)
	StartBuild(ctx context.Context, req builder.StartRequest) (string, error)
	Status(ctx context.Context, teamID, templateID, buildID string, logsOffset int) (*builder.Status, error)
	Logs(ctx context.Context, teamID, templateID, buildID string, q builder.LogsQuery) ([]templates.LogEntry, error)
}

var _ BuildService = (*builder.Service)(nil)

// Config configures the API server. Store, Lifecycle and Templates are
// required.
type Config struct {
	Store     store.Store
	Lifecycle *lifecycle.Manager
	Templates TemplateResolver
	Logger    *slog.Logger
	// AdminToken, when set, authenticates X-Admin-Token requests.
	AdminToken string
	// Domain is returned as the sandboxes' domain; empty returns null so
	// the SDK keeps its own E2B_DOMAIN.
	Domain string
	// DefaultResources are given to each sandbox (default 2 vCPU, 512 MiB,
	// 10 GiB disk).
	DefaultResources sandbox.Resources
	// DefaultLimits apply to teams whose own limits are zero (defaults:
	// WithDefaults).
	DefaultLimits store.Limits
	// RetryAfter is the Retry-After sent with a concurrency 429 (default
	// 5 s).
	RetryAfter time.Duration
	// Metrics, when set, is served at GET /metrics to admins (X-Admin-Token,
	// or Authorization: Bearer <admin token> for scrapers).
	Metrics http.Handler
	// Registry, when set, receives the HTTP series
	// (api_http_requests_total{route,method,status} and durations).
	Registry prometheus.Registerer

	// Builds and Catalog, when both set, serve E2B's template API
	// (templates.go): builds run in Builds (builder.Service, whose upload
	// handler must be mounted at builder.UploadPathPrefix outside this
	// server's auth; or nodebuild.Remote, builds on nodes).
	Builds  BuildService
	Catalog *templates.Catalog
	// PublicURL is the absolute URL clients reach the API at, used in the
	// upload URLs handed out; empty takes the request's scheme and Host.
	PublicURL string
	// Pools, when set, serves the warm pool admin routes (pools.go).
	Pools nodeapi.Pooler
	// Volumes, when set, serves E2B's Volume API and the volumeMounts of
	// a create (volumes.go, volumecontent.go); nil answers that the
	// server has no volumes.
	Volumes *volumes.Service
	// TrustedProxies are the reverse proxies in front of the API: for
	// their requests the client whose failed authentications are counted
	// (auththrottle.go) is the one their X-Forwarded-For names.
	TrustedProxies []netip.Prefix
	// Secrets serves /secrets and fills the secrets placeholders of
	// sandboxes' network rules; nil: a service without a key, which
	// refuses both (secrets.ErrNoKey).
	Secrets *secrets.Service
}

// Server serves the API. It is an http.Handler.
type Server struct {
	cfg Config
	st  store.Store
	lc  *lifecycle.Manager
	log *slog.Logger
	mux *http.ServeMux
	// routes are the patterns served, in the order handle added them.
	routes []string
	hm     *httpMetrics
	auths  *authThrottle
	// snapshots counts the snapshots in progress per team (snapshotcount.go).
	snapshots snapshotSlots
}

var _ http.Handler = (*Server)(nil)

// New returns a Server.
func New(cfg Config) (*Server, error) {
	if cfg.Store == nil || cfg.Lifecycle == nil || cfg.Templates == nil {
		return nil, fmt.Errorf("apiserver: store, lifecycle and templates are required: %w", errdefs.ErrInvalid)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	d := &cfg.DefaultResources
	if d.VCPUs == 0 {
		d.VCPUs = 2
	}
	if d.MemoryMB == 0 {
		d.MemoryMB = 512
	}
	if d.DiskMB == 0 {
		d.DiskMB = 10 * 1024
	}
	cfg.DefaultLimits = WithDefaults(cfg.DefaultLimits)
	if cfg.Secrets == nil {
		cfg.Secrets, _ = secrets.New(nil, nil)
	}
	if cfg.RetryAfter <= 0 {
		cfg.RetryAfter = 5 * time.Second
	}
	s := &Server{cfg: cfg, st: cfg.Store, lc: cfg.Lifecycle, log: cfg.Logger, mux: http.NewServeMux()}
	if err := s.initHTTPMetrics(cfg.Registry); err != nil {
		return nil, err
	}
	var err error
	if s.auths, err = newAuthThrottle(cfg.Registry); err != nil {
		return nil, err
	}
	s.addRoutes()
	return s, nil
}

// handle serves h at pattern and records the pattern (Routes).
func (s *Server) handle(pattern string, h http.Handler) {
	s.routes = append(s.routes, pattern)
	s.mux.Handle(pattern, h)
}

// Routes returns the patterns the server serves ("GET /sandboxes/{id}",
// ...) in the order they were added, MountEvents' and Handle's included;
// api/warren-openapi.json documents each (openapi_test.go checks it). The
// catch-all that answers 404 is not a route.
func (s *Server) Routes() []string { return slices.Clone(s.routes) }

func (s *Server) addRoutes() {
	team := func(h handlerFunc) http.Handler { return s.auth(h, false) }
	admin := func(h handlerFunc) http.Handler { return s.auth(h, true) }
	s.handle("GET /health", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })) // the spec's 204
	s.handle("GET /teams", team(s.listTeams))

	s.handle("POST /sandboxes", team(s.createV1))
	s.handle("POST /v2/sandboxes", team(s.createV2))
	s.handle("GET /sandboxes", team(s.listV1))
	s.handle("GET /v2/sandboxes", team(s.listV2))
	s.handle("GET /sandboxes/metrics", team(s.batchMetrics))
	s.handle("GET /sandboxes/{id}", team(s.getSandbox))
	s.handle("DELETE /sandboxes/{id}", team(s.kill))
	s.handle("POST /sandboxes/{id}/timeout", team(s.setTimeout))
	s.handle("POST /sandboxes/{id}/refreshes", team(s.refresh))
	s.handle("POST /sandboxes/{id}/pause", team(s.pause))
	s.handle("POST /sandboxes/{id}/resume", team(s.resume))
	s.handle("POST /sandboxes/{id}/connect", team(s.connectV1))
	s.handle("POST /v2/sandboxes/{id}/connect", team(s.connectV2))
	s.handle("GET /sandboxes/{id}/metrics", team(s.metrics))
	s.handle("GET /sandboxes/{id}/logs", team(s.logsV1))
	s.handle("GET /v2/sandboxes/{id}/logs", team(s.logsV2))
	s.handle("POST /sandboxes/{id}/fork", team(s.fork))
	s.handle("PUT /sandboxes/{id}/network", team(s.updateNetwork))
	s.handle("POST /sandboxes/{id}/snapshots", team(s.createSnapshot))
	s.handle("GET /sandboxes/{id}/egress", team(s.egressLog))
	s.handle("GET /secrets", team(s.listSecrets))
	s.handle("POST /secrets", team(s.createSecret))
	s.handle("GET /secrets/{secretID}", team(s.getSecret))
	s.handle("POST /secrets/{secretID}", team(s.updateSecret))
	s.handle("DELETE /secrets/{secretID}", team(s.deleteSecret))
	s.handle("GET /snapshots", team(s.listSnapshots))
	s.templateRoutes(team)
	s.volumeRoutes(team)

	s.handle("POST /admin/teams", admin(s.adminCreateTeam))
	s.handle("GET /admin/teams", admin(s.adminListTeams))
	s.handle("GET /admin/teams/{teamID}", admin(s.adminGetTeam))
	s.handle("PATCH /admin/teams/{teamID}", admin(s.adminUpdateTeam))
	s.handle("DELETE /admin/teams/{teamID}", admin(s.adminDeleteTeam))
	s.handle("POST /admin/teams/{teamID}/sandboxes/kill", admin(s.adminKillTeam))
	s.handle("GET /admin/sandboxes/running-counts", admin(s.adminRunningCounts))
	s.handle("POST /admin/teams/{teamID}/api-keys", admin(s.adminCreateKey))
	s.handle("DELETE /admin/teams/{teamID}/api-keys/{apiKeyID}", admin(s.adminDeleteKey))
	if s.cfg.Metrics != nil {
		s.handle("GET /metrics", admin(func(w http.ResponseWriter, r *http.Request, _ *caller) error {
			s.cfg.Metrics.ServeHTTP(w, r)
			return nil
		}))
	}
	s.poolRoutes(admin)
	s.mux.Handle("/", errhttp.Handler(func(_ http.ResponseWriter, r *http.Request) error { return errNoRoute(r) }, s.onError))
}

// Handle adds a route served behind the API's authentication (other
// packages' endpoints, e.g. templates). The handler finds the team with
// TeamFrom.
func (s *Server) Handle(pattern string, h http.Handler) {
	s.handle(pattern, s.auth(func(w http.ResponseWriter, r *http.Request, c *caller) error {
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), callerKey{}, c)))
		return nil
	}, false))
}

// HandleAdmin adds a route served to admins only (X-Admin-Token), e.g.
// the node registry's /admin/nodes.
func (s *Server) HandleAdmin(pattern string, h http.Handler) {
	s.handle(pattern, s.auth(func(w http.ResponseWriter, r *http.Request, c *caller) error {
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), callerKey{}, c)))
		return nil
	}, true))
}

// TeamFrom returns the authenticated team of a request served through
// Handle ("" for an admin acting on no team).
func TeamFrom(ctx context.Context) string {
	if c, ok := ctx.Value(callerKey{}).(*caller); ok {
		return c.teamID
	}
	return ""
}

type callerKey struct{}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.hm != nil {
		sw := &statusWriter{ResponseWriter: w}
		defer s.hm.observe(r, sw, time.Now())
		w = sw
	}
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			s.writeError(w, r, fmt.Errorf("api handler panic: %v", v))
		}
	}()
	if cors.IsPreflight(r) { // browsers: answered without a key
		cors.Preflight(w, r)
		return
	}
	cors.Allow(w.Header(), r)
	s.mux.ServeHTTP(w, r)
}

// caller is who made a request.
type caller struct {
	teamID string // "" only for an admin without X-Team-ID
	team   *store.Team
	admin  bool
}

// handlerFunc is an API handler: it answers and returns nil, or returns
// the error to answer (before it has written anything), which the one
// error boundary (onError) writes.
type handlerFunc func(http.ResponseWriter, *http.Request, *caller) error

// auth serves h to the callers it authenticates (admins only when
// adminOnly).
func (s *Server) auth(h handlerFunc, adminOnly bool) http.Handler {
	return errhttp.Handler(func(w http.ResponseWriter, r *http.Request) error {
		c, err := s.authenticate(r)
		if err == nil && adminOnly && !c.admin {
			err = errdefs.Publicf(errdefs.ErrForbidden, "this endpoint needs the admin token (X-Admin-Token)")
		}
		if err != nil {
			return err
		}
		return h(w, r, c)
	}, s.onError)
}

func (s *Server) authenticate(r *http.Request) (*caller, error) {
	ctx := r.Context()
	client := throttle.Client(r, s.cfg.TrustedProxies)
	tok := r.Header.Get("X-Admin-Token")
	if b, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && tok == "" && !strings.HasPrefix(b, KeyPrefix) {
		tok = b
	}
	if tok != "" {
		if err := s.auths.allow(client, credAdmin); err != nil {
			return nil, err
		}
		if s.cfg.AdminToken == "" || subtle.ConstantTimeCompare([]byte(tok), []byte(s.cfg.AdminToken)) != 1 {
			s.auths.failed(client, credAdmin)
			return nil, errdefs.Publicf(errdefs.ErrUnauthorized, "invalid admin token")
		}
		c := &caller{admin: true, teamID: r.Header.Get("X-Team-ID")}
		if c.teamID != "" {
			t, err := s.st.GetTeam(ctx, c.teamID)
			if errdefs.IsNotFound(err) {
				return nil, errdefs.Publicf(errdefs.ErrInvalid, "X-Team-ID: team %q does not exist", c.teamID)
			}
			if err != nil {
				return nil, fmt.Errorf("X-Team-ID: %w", err)
			}
			c.team = t
		}
		return c, nil
	}
	key := r.Header.Get("X-API-Key")
	if key == "" {
		if b, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && strings.HasPrefix(b, KeyPrefix) {
			key = b
		}
	}
	if key == "" {
		return nil, errdefs.Publicf(errdefs.ErrUnauthorized, "missing API key: set the X-API-Key header")
	}
	if err := s.auths.allow(client, credKey); err != nil {
		return nil, err
	}
	if !ValidKey(key) { // never stored: no need to look
		s.auths.failed(client, credKey)
		return nil, errdefs.Publicf(errdefs.ErrUnauthorized, "invalid API key")
	}
	k, err := s.st.APIKeyByHash(ctx, HashKey(key))
	if err != nil {
		if errdefs.IsNotFound(err) {
			s.auths.failed(client, credKey)
			return nil, errdefs.Publicf(errdefs.ErrUnauthorized, "invalid API key")
		}
		return nil, fmt.Errorf("api key lookup: %w", err)
	}
	t, err := s.st.GetTeam(ctx, k.TeamID)
	if errdefs.IsNotFound(err) {
		s.auths.failed(client, credKey)
		return nil, errdefs.Publicf(errdefs.ErrUnauthorized, "invalid API key: its team no longer exists")
	}
	if err != nil {
		return nil, fmt.Errorf("team of api key %q: %w", k.ID, err)
	}
	return &caller{teamID: t.ID, team: t}, nil
}

// limits returns the caller's effective limits.
func (s *Server) limits(c *caller) store.Limits { return EffectiveLimits(s.cfg.DefaultLimits, c.team) }

// Warren's default team limits that are new enough to be named.
const (
	// DefaultMaxDiskMB bounds one sandbox's disk (and a template's).
	DefaultMaxDiskMB = 20 << 10
	// DefaultMaxWebhooks bounds a team's webhooks.
	DefaultMaxWebhooks = 20
	// DefaultMaxTemplateStorageMB bounds the disk a team's templates take.
	DefaultMaxTemplateStorageMB = 100 << 10
	// DefaultMaxVolumes, DefaultMaxVolumeSizeMB and
	// DefaultMaxVolumeStorageMB bound a team's volumes: their number, one
	// volume's size (a create's size when it gives none) and their sizes'
	// sum.
	DefaultMaxVolumes         = 20
	DefaultMaxVolumeSizeMB    = 10 << 10
	DefaultMaxVolumeStorageMB = 50 << 10
)

// WithDefaults fills the zero fields of a server's default limits with
// Warren's: 20 concurrent sandboxes, 24 h timeout, 8 vCPU, 8 GiB, 20 GiB
// of disk per sandbox, 100 paused sandboxes, 100 snapshots, 20 webhooks,
// 100 GiB of template storage, 20 volumes of at most 10 GiB and 50 GiB in
// all; builds at once (MaxBuilds) stay 0, which the build service reads
// as half its build slots, at least 1.
func WithDefaults(l store.Limits) store.Limits {
	def := store.Limits{MaxConcurrent: 20, MaxTimeout: 24 * time.Hour, MaxVCPUs: 8, MaxMemoryMB: 8192, MaxPaused: 100, MaxSnapshots: 100,
		MaxDiskMB: DefaultMaxDiskMB, MaxWebhooks: DefaultMaxWebhooks, MaxTemplateStorageMB: DefaultMaxTemplateStorageMB,
		MaxVolumes: DefaultMaxVolumes, MaxVolumeSizeMB: DefaultMaxVolumeSizeMB, MaxVolumeStorageMB: DefaultMaxVolumeStorageMB}
	pick(&l, def)
	return l
}

// EffectiveLimits are team t's limits: its own non-zero ones, the
// server's defaults (WithDefaults) for the rest. t may be nil.
func EffectiveLimits(defaults store.Limits, t *store.Team) store.Limits {
	if t == nil {
		return defaults
	}
	l := t.Limits
	pick(&l, defaults)
	return l
}

// pick sets each zero field of l to def's.
func pick(l *store.Limits, def store.Limits) {
	for _, f := range []struct{ dst, def *int }{
		{&l.MaxConcurrent, &def.MaxConcurrent}, {&l.MaxVCPUs, &def.MaxVCPUs}, {&l.MaxPaused, &def.MaxPaused}, {&l.MaxSnapshots, &def.MaxSnapshots},
		{&l.MaxBuilds, &def.MaxBuilds}, {&l.MaxWebhooks, &def.MaxWebhooks}, {&l.MaxVolumes, &def.MaxVolumes},
	} {
		if *f.dst == 0 {
			*f.dst = *f.def
		}
	}
	if l.MaxMemoryMB == 0 {
		l.MaxMemoryMB = def.MaxMemoryMB
	}
	if l.MaxDiskMB == 0 {
		l.MaxDiskMB = def.MaxDiskMB
	}
	if l.MaxTemplateStorageMB == 0 {
		l.MaxTemplateStorageMB = def.MaxTemplateStorageMB
	}
	if l.MaxVolumeSizeMB == 0 {
		l.MaxVolumeSizeMB = def.MaxVolumeSizeMB
	}
	if l.MaxVolumeStorageMB == 0 {
		l.MaxVolumeStorageMB = def.MaxVolumeStorageMB
	}
	if l.MaxTimeout == 0 {
		l.MaxTimeout = def.MaxTimeout
	}
}

// LifecycleLimits is lifecycle.Config.TeamLimits over st: a team's
// concurrency and paused bounds, defaults (WithDefaults) filled in.
func LifecycleLimits(st store.Store, defaults store.Limits) func(ctx context.Context, teamID string) (lifecycle.TeamLimits, error) {
	defaults = WithDefaults(defaults)
	return func(ctx context.Context, teamID string) (lifecycle.TeamLimits, error) {
		t, err := st.GetTeam(ctx, teamID)
		if err != nil {
			return lifecycle.TeamLimits{}, err
		}
		l := EffectiveLimits(defaults, t)
		return lifecycle.TeamLimits{MaxConcurrent: l.MaxConcurrent, MaxPaused: l.MaxPaused}, nil
	}
}

// writeJSON writes v with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		errhttp.WriteBody(w, http.StatusInternalServerError, "internal error")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(b)
}

// onError is the REST API's one error boundary, for every error a handler
// returns (handlerFunc): errhttp's table chooses the status and the
// message of the E2B error body {"code", "message"} (the message chosen
// where the error was made, or the class's words: never the error's
// text), and the log gets the error (errhttp.LogLevel: a 500 at Error,
// another 5xx at Warn, a client's 4xx at Debug). A 429 carries
// Retry-After.
func (s *Server) onError(r *http.Request, he *errhttp.HTTPError) {
	s.log.Log(r.Context(), errhttp.LogLevel(he), "api request failed", "method", r.Method, "path", r.URL.Path, "status", he.Code, "error", he.Err)
	if he.Code == http.StatusTooManyRequests && he.Header.Get("Retry-After") == "" {
		secs := int(s.cfg.RetryAfter.Seconds())
		var te *throttledError
		if errors.As(he.Err, &te) {
			secs = te.seconds()
		}
		he.Header.Set("Retry-After", fmt.Sprint(secs))
	}
}

// writeError answers err outside a handler (a panic) through onError.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	he := errhttp.From(err)
	s.onError(r, he)
	errhttp.WriteHTTPError(w, he)
}

// errNoRoute answers a request no route serves.
func errNoRoute(r *http.Request) error {
	return errdefs.Publicf(errdefs.ErrNotFound, "no route for %s %s", r.Method, r.URL.Path)
}

// sandboxNotFound is E2B's not-found message for a sandbox.
const sandboxNotFound = "sandbox %q doesn't exist or you don't have access to it"

// errSandboxNotFound is the not-found error for sandbox id.
func errSandboxNotFound(id string) error {
	return errdefs.Publicf(errdefs.ErrNotFound, sandboxNotFound, id)
}

// sandboxErr is err of an operation on sandbox id, as its client is told
// of it: E2B's message when it is not found.
func sandboxErr(id string, err error) error {
	if errdefs.IsNotFound(err) {
		return errdefs.WithMessage(err, fmt.Sprintf(sandboxNotFound, id))
	}
	return err
}

// decode reads an optional JSON body into v. Unknown fields are accepted;
// a value of the wrong type is rejected naming the field.
func decode(r *http.Request, v any, required bool) error {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		return errdefs.Publicf(errdefs.ErrInvalid, "read body")
	}
	if len(strings.TrimSpace(string(body))) == 0 {
		if required {
			return errdefs.Publicf(errdefs.ErrInvalid, "request body is required")
		}
		return nil
	}
	if err := json.Unmarshal(body, v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return errdefs.Publicf(errdefs.ErrInvalid, "invalid value for field '%s': expected %s, got %s", te.Field, te.Type, te.Value)
		}
		return errdefs.Publicf(errdefs.ErrInvalid, "invalid JSON body: %v", err) // errtext: the decoder's complaint about the client's input
	}
	return nil
}

// invalid builds a 400 error naming field.
func invalid(field, format string, args ...any) error {
	return errdefs.Publicf(errdefs.ErrInvalid, "invalid value for field '%s': %s", field, fmt.Sprintf(format, args...))
}
