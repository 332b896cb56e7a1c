package apiserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/warren-sandbox/warren/internal/route"
	"github.com/warren-sandbox/warren/pkg/client"
)

// envdLogsTimeout bounds reading a sandbox's kept log from its envd.
const envdLogsTimeout = 5 * time.Second

// errAsleep refuses to route to a sandbox that is not running: reading
// logs never wakes one.
var errAsleep = errors.New("sandbox is not running")

// envdLogs returns the log a running sandbox keeps in its envd (the start
// command's output, envd's own lines) from start on, or nil when it is
// paused or unreachable (what the control plane recorded is still served).
func (s *Server) envdLogs(ctx context.Context, id string, start time.Time) []client.LogEntry {
	route, err := s.lc.Route(ctx, id, func(a *route.Admission) error {
		if a.Paused {
			return errAsleep
		}
		return nil
	})
	if err != nil || route.Address == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, envdLogsTimeout)
	defer cancel()
	u := "http://" + route.Address + "/logs"
	if !start.IsZero() {
		u += fmt.Sprintf("?start=%d", start.UnixMilli())
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil
	}
	if route.EnvdAccessToken != "" {
		req.Header.Set("X-Access-Token", route.EnvdAccessToken)
	}
	resp, err := s.envd.Do(req)
	if err != nil {
		s.log.Debug("sandbox logs from envd", "sandbox_id", id, "error", err)
		return nil
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		s.log.Debug("sandbox logs from envd", "sandbox_id", id, "status", resp.StatusCode)
		return nil
	}
	var body struct {
		Logs []client.LogEntry `json:"logs"`
	}
	// The sandbox is the tenant's: bound what is read from it.
	if err := json.NewDecoder(http.MaxBytesReader(nil, resp.Body, 8<<20)).Decode(&body); err != nil {
		s.log.Debug("sandbox logs from envd", "sandbox_id", id, "error", err)
		return nil
	}
	for i := range body.Logs {
		if body.Logs[i].Fields == nil {
			body.Logs[i].Fields = map[string]string{}
		}
		if body.Logs[i].Level == "" {
			body.Logs[i].Level = "info"
		}
	}
	return body.Logs
}

// sandboxLevelRank orders log levels for the level filter (unknown: info).
func sandboxLevelRank(l string) int {
	switch l {
	case "debug":
		return 0
	case "warn":
		return 2
	case "error":
		return 3
	default:
		return 1
	}
}
