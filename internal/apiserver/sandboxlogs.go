package apiserver

import (
	"context"
	"time"

	"github.com/warren-sandbox/warren/pkg/client"
)

// envdLogsTimeout bounds reading a sandbox's kept log through its node.
const envdLogsTimeout = 10 * time.Second

// envdLogs returns the log a running sandbox keeps in its envd (the start
// command's output, envd's own lines) from start on, as its node reads it
// (lifecycle.Manager.KeptLogs over nodeapi.LogSource: the API never dials
// a sandbox), or nil when it is paused or its node does not answer (what
// the control plane recorded is still served).
func (s *Server) envdLogs(ctx context.Context, id string, start time.Time) []client.LogEntry {
	ctx, cancel := context.WithTimeout(ctx, envdLogsTimeout)
	defer cancel()
	entries, err := s.lc.KeptLogs(ctx, id, start)
	if err != nil {
		s.log.Debug("sandbox logs from its node", "sandbox_id", id, "error", err)
		return nil
	}
	out := make([]client.LogEntry, 0, len(entries))
	for _, e := range entries {
		fields := e.Fields
		if fields == nil {
			fields = map[string]string{}
		}
		level := e.Level
		if level == "" {
			level = "info"
		}
		out = append(out, client.LogEntry{Timestamp: e.Timestamp, Level: level, Message: e.Message, Fields: fields})
	}
	return out
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
