package envd

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/warren-sandbox/warren/internal/cors"
	"github.com/warren-sandbox/warren/internal/envd/auth"
	"github.com/warren-sandbox/warren/internal/envd/files"
	"github.com/warren-sandbox/warren/internal/envd/filesystem"
	"github.com/warren-sandbox/warren/internal/envd/logbuf"
	"github.com/warren-sandbox/warren/internal/envd/metrics"
	"github.com/warren-sandbox/warren/internal/envd/portfwd"
	"github.com/warren-sandbox/warren/internal/envd/process"
	"github.com/warren-sandbox/warren/internal/envd/reaper"
	"github.com/warren-sandbox/warren/internal/envd/state"
	"github.com/warren-sandbox/warren/internal/envdproto"
)

// Server is envd: every subsystem, composed once.
type Server struct {
	cfg      Config
	log      *slog.Logger
	state    *state.State
	auth     *auth.Auth
	initGate *auth.InitGate
	reaper   *reaper.Reaper // nil unless cfg.Init
	procs    *process.Manager
	fs       *filesystem.Service
	sampler  *metrics.Sampler
	logs     *logbuf.Buffer
	// inited is set by the first /init (see init).
	inited atomic.Bool
	// initID is renewed at start and at every /init (newInitID); GET
	// /envs reports it (envdproto.InitIDHeader).
	initID  atomic.Pointer[string]
	handler http.Handler
	// tasksExempt: envd is exempt from the task limit it sets for the
	// processes it starts (see tasks_linux.go).
	tasksExempt bool
}

// New builds a Server from a validated configuration.
func New(cfg Config, log *slog.Logger) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	env := cfg.TemplateEnv
	if env == nil {
		env = state.EnvFromOS()
	}
	st := state.New(env)
	gate, err := auth.NewInitGate(cfg.InitTokenSHA256, st)
	if err != nil {
		return nil, err
	}
	logs := logbuf.New(cfg.LogBytes)
	log = slog.New(logs.Handler(log.Handler())) // envd's own lines are kept too
	s := &Server{cfg: cfg, log: log, state: st, auth: auth.New(st), initGate: gate, sampler: metrics.NewSampler(), logs: logs}
	s.renewInitID()
	var spawner process.Spawner = reaper.Direct{}
	if cfg.Init {
		s.reaper = reaper.New(log)
		spawner = s.reaper
		if s.tasksExempt, err = dropTaskExemption(); err != nil {
			return nil, err
		}
	}
	s.procs = process.NewManager(log, spawner, cfg.ProcessRetain)
	s.procs.KeepStartOutput(logs)
	s.fs = filesystem.NewService(log, s.auth, st)

	mux := http.NewServeMux()
	mux.Handle(process.NewService(s.procs, s.auth, st).Handler())
	mux.Handle(s.fs.Handler())
	mux.Handle("/files", files.New(log, s.auth))
	mux.HandleFunc("GET /health", s.health)
	mux.HandleFunc("GET /metrics", s.metrics)
	mux.HandleFunc("GET /envs", s.envs)
	mux.HandleFunc("GET /logs", s.serveLogs)
	mux.HandleFunc("POST /init", s.init)
	s.handler = cors.Handler(s.auth.Middleware(mux))
	return s, nil
}

// Handler returns envd's HTTP handler (for tests and embedding).
func (s *Server) Handler() http.Handler { return s.handler }

// Run listens and serves until ctx ends, with the reaper and the port
// forwarder alongside.
func (s *Server) Run(ctx context.Context) error {
	addr := net.JoinHostPort(s.cfg.ListenAddr, strconv.Itoa(s.cfg.Port))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", addr, err)
	}
	return s.Serve(ctx, ln)
}

// Serve serves on ln until ctx ends.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if s.reaper != nil {
		go s.reaper.Run(ctx)
	}
	if s.cfg.PortForward {
		fw := portfwd.New(s.log, portfwd.Config{Exclude: []uint16{uint16(s.cfg.Port)}})
		go fw.Run(ctx)
	}
	defer s.fs.Close()
	srv := &http.Server{Handler: s.handler, ReadHeaderTimeout: 30 * time.Second, IdleTimeout: 10 * time.Minute, ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelDebug)}
	// HTTP/1.1 for the SDKs, and HTTP/2 without TLS (prior knowledge) for
	// proxies and gRPC clients, which also makes client streams
	// (StreamInput) full duplex.
	srv.Protocols = new(http.Protocols)
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	s.log.Info("envd listening", "addr", ln.Addr().String(), "version", Version, "init", s.cfg.Init)
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	shutdown, cancelShutdown := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancelShutdown()
	if err := srv.Shutdown(shutdown); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}

func (s *Server) health(w http.ResponseWriter, _ *http.Request) {
	if m, err := metrics.ReadMemInfo(s.sampler.ProcRoot); err == nil {
		w.Header().Set("X-Warren-Mem-Used", strconv.FormatUint(m.Used(), 10))
	}
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) metrics(w http.ResponseWriter, _ *http.Request) {
	m, err := s.sampler.Sample()
	if err != nil {
		s.log.Warn("metrics", "error", err)
		auth.WriteError(w, http.StatusInternalServerError, "metrics unavailable")
		return
	}
	writeJSON(w, m)
}

func (s *Server) envs(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set(envdproto.InitIDHeader, *s.initID.Load())
	writeJSON(w, s.state.InitEnv())
}

// renewInitID gives envd a new init ID, from the kernel's random source
// (crypto/rand), which differs in every copy of a restored image.
func (s *Server) renewInitID() {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails on Linux (Go 1.24+)
	id := hex.EncodeToString(b[:])
	s.initID.Store(&id)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(v)
}

// serveLogs answers GET /logs?start=<unix ms>&limit=<n>: the sandbox's
// kept log (envd's lines and the start command's output), oldest first.
// Warren's own route (the API's sandbox logs read it); it needs the
// access token like every route but /health and /files.
func (s *Server) serveLogs(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var start time.Time
	if v := q.Get("start"); v != "" {
		ms, err := strconv.ParseInt(v, 10, 64)
		if err != nil || ms < 0 {
			auth.WriteError(w, http.StatusBadRequest, "start must be a non-negative Unix time in milliseconds")
			return
		}
		start = time.UnixMilli(ms)
	}
	limit := 0
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			auth.WriteError(w, http.StatusBadRequest, "limit must be a non-negative integer")
			return
		}
		limit = n
	}
	writeJSON(w, struct {
		Logs []logbuf.Entry `json:"logs"`
	}{s.logs.Since(start, limit)})
}
