package envd

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/warren-sandbox/warren/internal/envd/auth"
	"github.com/warren-sandbox/warren/internal/envd/state"
	"github.com/warren-sandbox/warren/internal/errdefs/errhttp"
)

// initRequest is the body of POST /init. Fields of upstream's schema that
// Warren does not use are accepted and ignored.
type initRequest struct {
	EnvVars        map[string]string `json:"envVars"`
	AccessToken    *string           `json:"accessToken"`
	DefaultUser    *string           `json:"defaultUser"`
	DefaultWorkdir *string           `json:"defaultWorkdir"`
	Timestamp      *time.Time        `json:"timestamp"`
	CABundle       string            `json:"caBundle"`
	// TasksLimit is Warren's: the most tasks (processes and threads) per
	// user that processes envd starts may have (RLIMIT_NPROC); 0 leaves
	// the limit alone.
	TasksLimit uint64 `json:"tasksLimit"`
}

// maxInitBody bounds the /init body.
const maxInitBody = 1 << 20

func (s *Server) init(w http.ResponseWriter, r *http.Request) {
	if !s.initGate.Allowed(r) {
		auth.WriteError(w, http.StatusUnauthorized, "init is reserved to the node")
		return
	}
	var req initRequest
	dec := json.NewDecoder(io.LimitReader(r.Body, maxInitBody))
	if err := dec.Decode(&req); err != nil && !errors.Is(err, io.EOF) {
		auth.WriteError(w, http.StatusBadRequest, "invalid init body: "+err.Error())
		return
	}
	// A later /init with another access token is a new sandbox restored
	// from a snapshot of this one (a template's, made at build time): the
	// log it keeps is the build's, not this sandbox's, and may be another
	// team's. A resume of the same sandbox keeps its token and its log.
	if req.AccessToken != nil && s.inited.Swap(true) && *req.AccessToken != s.state.Token() {
		s.logs.Reset()
	}
	s.inited.Store(true)
	// Every /init is a start or a restore of this memory (which may be
	// one of many copies): processes that compare the init ID renew
	// their state.
	s.renewInitID()
	s.state.Apply(state.Update{
		EnvVars:        req.EnvVars,
		AccessToken:    req.AccessToken,
		DefaultUser:    req.DefaultUser,
		DefaultWorkdir: req.DefaultWorkdir,
	})
	if req.Timestamp != nil && s.cfg.Init {
		if err := syncClock(*req.Timestamp); err != nil {
			s.log.Warn("clock not set", "error", err)
		}
	}
	if req.TasksLimit > 0 {
		s.applyTasksLimit(req.TasksLimit)
	}
	if req.CABundle != "" {
		if s.cfg.TrustStore == "" {
			s.log.Warn("ca bundle ignored: no trust store configured")
		} else if n, err := installCABundle(s.cfg.TrustStore, req.CABundle); err != nil {
			auth.WriteError(w, errhttp.Status(err), "ca bundle not installed")
			s.log.Warn("ca bundle", "error", err)
			return
		} else if n > 0 {
			s.log.Info("ca certificates installed", "count", n, "trust_store", s.cfg.TrustStore)
		}
	}
	s.log.Info("init applied", "env_vars", len(req.EnvVars), "token_set", req.AccessToken != nil && *req.AccessToken != "",
		"default_user", s.state.DefaultUserName())
	w.WriteHeader(http.StatusNoContent)
}

// applyTasksLimit sets the task limit of the processes envd starts, when
// envd is exempt from it itself; otherwise the limit is ignored (a limit
// envd is subject to could stop envd).
func (s *Server) applyTasksLimit(n uint64) {
	if !s.tasksExempt {
		s.log.Debug("task limit ignored: envd would be subject to it", "tasks_limit", n)
		return
	}
	if err := setTasksLimit(n); err != nil {
		s.log.Warn("task limit not set", "error", err)
		return
	}
	s.log.Info("task limit set", "tasks_limit", n)
}
