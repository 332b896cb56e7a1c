package node

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/sandbox"
)

// Bounds of reading a sandbox's kept log from its envd: the sandbox is
// the tenant's, so its answer is limited in time and size.
const (
	envdLogsTimeout  = 5 * time.Second
	envdLogsMaxBytes = 8 << 20
)

// EnvdLogs is what an Envd may do besides: read the log a sandbox's envd
// keeps (its GET /logs). HTTPEnvd and memhost.Envd do.
type EnvdLogs interface {
	Logs(ctx context.Context, addr, accessToken string, start time.Time) ([]nodeapi.LogEntry, error)
}

// SandboxLogs implements nodeapi.LogSource: the node reads the log from
// the sandbox's envd, with the access token it keeps for it.
func (a *Agent) SandboxLogs(ctx context.Context, id string, start time.Time) ([]nodeapi.LogEntry, error) {
	h, err := a.lookup(id)
	if err != nil {
		return nil, err
	}
	st := h.get()
	gone, internal, state := st.gone, st.internal, st.rec.State
	var addr string
	if state == sandbox.StateRunning && st.rec.Slot != nil {
		addr = a.envdAddr(st.rec.Slot)
	}
	token := st.rec.AccessToken
	switch {
	case gone || internal:
		return nil, fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
	case addr == "":
		return nil, fmt.Errorf("sandbox %q is %s, not running: %w", id, state, errdefs.ErrConflict)
	}
	el, ok := a.cfg.Envd.(EnvdLogs)
	if !ok {
		return nil, fmt.Errorf("sandbox %q logs: this node's envd client reads none: %w", id, errdefs.ErrUnsupported)
	}
	ctx, cancel := context.WithTimeout(ctx, envdLogsTimeout)
	defer cancel()
	out, err := el.Logs(ctx, addr, token, start)
	if err != nil {
		return nil, fmt.Errorf("sandbox %q logs: %w", id, err)
	}
	return out, nil
}

// Logs implements EnvdLogs: GET /logs of the envd at addr, its answer
// bounded (envdLogsMaxBytes); entries without a level are "info".
func (e *HTTPEnvd) Logs(ctx context.Context, addr, accessToken string, start time.Time) ([]nodeapi.LogEntry, error) {
	u := "http://" + addr + "/logs"
	if !start.IsZero() {
		u += "?start=" + strconv.FormatInt(start.UnixMilli(), 10)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	if accessToken != "" {
		req.Header.Set("X-Access-Token", accessToken)
	}
	resp, err := e.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("envd logs: %w: %w", errdefs.ErrUnavailable, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
		return nil, fmt.Errorf("envd logs: status %s: %w", resp.Status, errdefs.ErrUnavailable)
	}
	var body struct {
		Logs []struct {
			Timestamp time.Time         `json:"timestamp"`
			Level     string            `json:"level"`
			Message   string            `json:"message"`
			Fields    map[string]string `json:"fields"`
		} `json:"logs"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, envdLogsMaxBytes)).Decode(&body); err != nil {
		return nil, fmt.Errorf("envd logs: %w: %w", errdefs.ErrUnavailable, err)
	}
	out := make([]nodeapi.LogEntry, 0, len(body.Logs))
	for _, l := range body.Logs {
		if l.Level == "" {
			l.Level = "info"
		}
		out = append(out, nodeapi.LogEntry{Timestamp: l.Timestamp, Level: l.Level, Message: l.Message, Fields: l.Fields})
	}
	return out, nil
}
