package apiserver

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/sandbox"
	"github.com/warren-sandbox/warren/internal/store"
	"github.com/warren-sandbox/warren/pkg/client"
)

// ParseMetadataFilter decodes the list endpoints' metadata query value.
// The SDK encodes each key and value, joins the pairs as a query string and
// the whole is encoded once more by the query serializer; r.URL.Query()
// has undone the last layer, so what is left is "k=v&k2=v2" with each key
// and value still query-escaped (docs/api.md, "Metadata filter").
func ParseMetadataFilter(raw string) (map[string]string, error) {
	if raw == "" {
		return nil, nil
	}
	joined, err := url.QueryUnescape(raw)
	if err != nil {
		return nil, invalid("metadata", "not a query-encoded string: %v", err) // errtext: the unescaper's complaint about the client's input
	}
	out := map[string]string{}
	for _, pair := range strings.Split(joined, "&") {
		if pair == "" {
			continue
		}
		k, v, ok := strings.Cut(pair, "=")
		if !ok {
			return nil, invalid("metadata", "pair %q has no '='", pair)
		}
		key, err := url.QueryUnescape(k)
		if err != nil {
			return nil, invalid("metadata", "key %q: %v", k, err) // errtext: the unescaper's complaint about the client's input
		}
		val, err := url.QueryUnescape(v)
		if err != nil {
			return nil, invalid("metadata", "value of %q: %v", key, err) // errtext: the unescaper's complaint about the client's input
		}
		out[key] = val
	}
	return out, nil
}

func matches(md, filter map[string]string) bool {
	for k, v := range filter {
		if got, ok := md[k]; !ok || got != v {
			return false
		}
	}
	return true
}

func parseLimit(v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 100 {
		return 0, invalid("limit", "must be an integer between 1 and 100, got %q", v)
	}
	return n, nil
}

// cursor is the position after which a page starts.
type cursor struct {
	startedAt int64
	id        string
}

func (c cursor) encode() string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(c.startedAt, 10) + "|" + c.id))
}

func decodeCursor(s string) (cursor, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err == nil {
		if ts, id, ok := strings.Cut(string(b), "|"); ok {
			if n, err := strconv.ParseInt(ts, 10, 64); err == nil && sandbox.ValidID(id) {
				return cursor{n, id}, nil
			}
		}
	}
	return cursor{}, invalid("nextToken", "not a token this server issued")
}

// before reports whether a sorts before b in ascending (start, id) order.
func (c cursor) before(o cursor) bool {
	if c.startedAt != o.startedAt {
		return c.startedAt < o.startedAt
	}
	return c.id < o.id
}

func cursorOf(sb *store.Sandbox) cursor { return cursor{sb.StartedAt.UnixNano(), sb.ID} }

type listQuery struct {
	filter   store.SandboxFilter
	metadata map[string]string
	desc     bool
	limit    int
	after    *cursor
}

func (s *Server) parseList(r *http.Request, c *caller, v2 bool) (*listQuery, error) {
	q := r.URL.Query()
	lq := &listQuery{filter: store.SandboxFilter{TeamID: c.teamID}, desc: true}
	var err error
	if lq.metadata, err = ParseMetadataFilter(q.Get("metadata")); err != nil {
		return nil, err
	}
	if !v2 {
		lq.filter.States = []sandbox.State{sandbox.StateStarting, sandbox.StateRunning}
		return lq, nil
	}
	lq.filter.States = store.LiveStates
	if v := q.Get("state"); v != "" {
		lq.filter.States = nil
		for _, st := range strings.Split(v, ",") {
			switch strings.TrimSpace(st) {
			case "running":
				lq.filter.States = append(lq.filter.States, sandbox.StateStarting, sandbox.StateRunning)
			case "paused":
				lq.filter.States = append(lq.filter.States, sandbox.StatePausing, sandbox.StatePaused)
			default:
				return nil, invalid("state", "%q is not one of running, paused", st)
			}
		}
	}
	if v := q.Get("startedAfter"); v != "" {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return nil, invalid("startedAfter", "not an RFC 3339 time: %q", v)
		}
		lq.filter.StartedAfter = t
	}
	if v := q.Get("template"); v != "" {
		tmpl, err := s.cfg.Templates.Resolve(r.Context(), c.teamID, v)
		switch {
		case err == nil:
			lq.filter.TemplateID = tmpl.ID
		case errdefs.IsNotFound(err):
			lq.filter.TemplateID = v
		default:
			return nil, err
		}
	}
	switch v := q.Get("order"); v {
	case "", "desc":
	case "asc":
		lq.desc = false
	default:
		return nil, invalid("order", "%q is not one of asc, desc", v)
	}
	lq.limit = 100
	if v := q.Get("limit"); v != "" {
		if lq.limit, err = parseLimit(v); err != nil {
			return nil, err
		}
	}
	if v := q.Get("nextToken"); v != "" {
		cur, err := decodeCursor(v)
		if err != nil {
			return nil, err
		}
		lq.after = &cur
	}
	return lq, nil
}

func (s *Server) list(w http.ResponseWriter, r *http.Request, c *caller, v2 bool) error {
	lq, err := s.parseList(r, c, v2)
	if err != nil {
		return err
	}
	all, err := s.st.ListSandboxes(r.Context(), lq.filter)
	if err != nil {
		return err
	}
	all = slices.DeleteFunc(all, func(sb *store.Sandbox) bool { return !matches(sb.Spec.Metadata, lq.metadata) })
	if lq.desc {
		slices.Reverse(all)
	}
	running := 0
	for _, sb := range all {
		if sb.State == sandbox.StateRunning || sb.State == sandbox.StateStarting {
			running++
		}
	}
	if lq.after != nil {
		after := *lq.after
		i := slices.IndexFunc(all, func(sb *store.Sandbox) bool {
			if lq.desc {
				return cursorOf(sb).before(after)
			}
			return after.before(cursorOf(sb))
		})
		if i < 0 {
			i = len(all)
		}
		all = all[i:]
	}
	if v2 {
		if slices.Contains(lq.filter.States, sandbox.StateRunning) {
			w.Header().Set("X-Total-Running", strconv.Itoa(running))
		}
		if lq.limit < len(all) {
			all = all[:lq.limit]
			w.Header().Set("X-Next-Token", cursorOf(all[len(all)-1]).encode())
		}
	}
	out := make([]client.ListedSandbox, 0, len(all))
	for _, sb := range all {
		out = append(out, listedJSON(sb))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) listV1(w http.ResponseWriter, r *http.Request, c *caller) error {
	return s.list(w, r, c, false)
}

func (s *Server) listV2(w http.ResponseWriter, r *http.Request, c *caller) error {
	return s.list(w, r, c, true)
}

func metricOf(st *nodeapi.Stats) client.Metric {
	return client.Metric{
		Timestamp: st.At.UTC(), TimestampUnix: st.At.Unix(), CPUCount: st.CPUCount, CPUUsedPct: st.CPUUsedPct,
		MemUsed: st.MemoryUsedBytes, MemTotal: st.MemoryTotal, DiskUsed: st.DiskUsedBytes, DiskTotal: st.DiskTotalBytes,
	}
}

func (s *Server) metrics(w http.ResponseWriter, r *http.Request, c *caller) error {
	id := r.PathValue("id")
	q := r.URL.Query()
	var bounds [2]int64
	for i, name := range []string{"start", "end"} {
		if v := q.Get(name); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				return invalid(name, "must be a non-negative Unix time in seconds, got %q", v)
			}
			bounds[i] = n
		}
	}
	if bounds[0] != 0 && bounds[1] != 0 && bounds[1] < bounds[0] {
		return invalid("end", "must not be before start")
	}
	var from, to time.Time
	if bounds[0] != 0 {
		from = time.Unix(bounds[0], 0)
	}
	if bounds[1] != 0 {
		to = time.Unix(bounds[1], int64(time.Second-1)) // the whole end second
	}
	samples, err := s.lc.Metrics(r.Context(), c.teamID, id, from, to)
	if err != nil {
		return sandboxErr(id, err)
	}
	out := make([]client.Metric, 0, len(samples))
	for i := range samples {
		out = append(out, metricOf(&samples[i]))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) batchMetrics(w http.ResponseWriter, r *http.Request, c *caller) error {
	raw := r.URL.Query().Get("sandbox_ids")
	if raw == "" {
		return invalid("sandbox_ids", "required")
	}
	ids := strings.Split(raw, ",")
	if len(ids) > 100 {
		return invalid("sandbox_ids", "at most 100 IDs, got %d", len(ids))
	}
	out := client.SandboxesWithMetrics{Sandboxes: map[string]client.Metric{}}
	for _, id := range ids {
		st, err := s.lc.LatestMetric(r.Context(), c.teamID, id)
		if err != nil || st == nil {
			continue // unknown, paused or gone: no sample
		}
		out.Sandboxes[id] = metricOf(st)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// logEntries renders a sandbox's lifecycle events as log entries (the
// control plane's records) and, while it runs, merges in by time the log
// its envd keeps: the start command's output and envd's own lines.
func (s *Server) logEntries(r *http.Request, c *caller, id string) ([]client.LogEntry, error) {
	sb, err := s.st.GetSandbox(r.Context(), id)
	if err != nil {
		return nil, err
	}
	if c.teamID != "" && sb.TeamID != c.teamID {
		return nil, errdefs.Publicf(errdefs.ErrNotFound, "sandbox %q", id)
	}
	evs, err := s.st.ListEvents(r.Context(), id)
	if err != nil {
		return nil, err
	}
	out := make([]client.LogEntry, 0, len(evs))
	for _, e := range evs {
		fields := map[string]string{"event": e.Type, "epoch": strconv.FormatInt(e.Epoch, 10)}
		msg := "sandbox " + e.Type
		if e.Type == store.EventKilled {
			fields["kill_reason"] = e.Reason.String()
			msg += " (" + e.Reason.String() + ")"
		}
		if e.Message != "" {
			fields["detail"] = e.Message
		}
		out = append(out, client.LogEntry{Timestamp: e.At, Level: "info", Message: msg, Fields: fields})
	}
	if sb.State == sandbox.StateRunning {
		out = append(out, s.envdLogs(r.Context(), id, time.Time{})...)
		slices.SortStableFunc(out, func(a, b client.LogEntry) int { return a.Timestamp.Compare(b.Timestamp) })
	}
	return out, nil
}

func (s *Server) logsV1(w http.ResponseWriter, r *http.Request, c *caller) error {
	id := r.PathValue("id")
	q := r.URL.Query()
	var start int64
	limit := 1000
	if v := q.Get("start"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return invalid("start", "must be a non-negative Unix time in milliseconds, got %q", v)
		}
		start = n
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return invalid("limit", "must be a non-negative integer, got %q", v)
		}
		limit = n
	}
	entries, err := s.logEntries(r, c, id)
	if err != nil {
		return sandboxErr(id, err)
	}
	out := client.SandboxLogs{Logs: []client.LogLine{}, LogEntries: []client.LogEntry{}}
	for _, e := range entries {
		if e.Timestamp.UnixMilli() < start || len(out.LogEntries) >= limit {
			continue
		}
		out.LogEntries = append(out.LogEntries, e)
		out.Logs = append(out.Logs, client.LogLine{Timestamp: e.Timestamp, Line: logLine(e)})
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// logLine renders an entry as the v1 logs' line: a JSON object with level,
// message and the entry's fields, as E2B's are (the CLI's `sandbox logs`
// parses every line and reads its level).
func logLine(e client.LogEntry) string {
	m := make(map[string]string, len(e.Fields)+3)
	for k, v := range e.Fields {
		m[k] = v
	}
	m["level"], m["message"] = e.Level, e.Message
	b, _ := json.Marshal(m)
	return string(b)
}

func (s *Server) logsV2(w http.ResponseWriter, r *http.Request, c *caller) error {
	id := r.PathValue("id")
	q := r.URL.Query()
	limit := 1000
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 1000 {
			return invalid("limit", "must be an integer between 0 and 1000, got %q", v)
		}
		limit = n
	}
	var cursorMs int64
	if v := q.Get("cursor"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return invalid("cursor", "must be a non-negative Unix time in milliseconds, got %q", v)
		}
		cursorMs = n
	}
	dir := q.Get("direction")
	if dir != "" && dir != "forward" && dir != "backward" {
		return invalid("direction", "%q is not one of forward, backward", dir)
	}
	level := q.Get("level")
	switch level {
	case "", "debug", "info", "warn", "error":
	default:
		return invalid("level", "%q is not one of debug, info, warn, error", level)
	}
	entries, err := s.logEntries(r, c, id)
	if err != nil {
		return sandboxErr(id, err)
	}
	if dir == "backward" {
		slices.Reverse(entries)
	}
	search := q.Get("search")
	out := client.SandboxLogsV2{Logs: []client.LogEntry{}}
	for _, e := range entries {
		ms := e.Timestamp.UnixMilli()
		if cursorMs != 0 && (dir == "backward" && ms > cursorMs || dir != "backward" && ms < cursorMs) {
			continue
		}
		if level != "" && sandboxLevelRank(e.Level) < sandboxLevelRank(level) {
			continue
		}
		if search != "" && !strings.Contains(e.Message, search) {
			continue
		}
		if len(out.Logs) >= limit {
			break
		}
		out.Logs = append(out.Logs, e)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
