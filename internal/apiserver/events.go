package apiserver

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/events"
	"github.com/warren-sandbox/warren/internal/store"
)

// EventsConfig configures the lifecycle events and webhooks endpoints.
type EventsConfig struct {
	// Poke, when set, is called after a redeliver so the webhook
	// dispatcher looks at its outbox at once.
	Poke func()
	// ValidateURL checks a webhook URL at registration (default: an
	// absolute http(s) URL).
	ValidateURL func(string) error
}

// MountEvents adds the lifecycle events API and the webhook endpoints, with
// E2B's paths:
//
//	GET    /events/sandboxes                       the team's events
//	GET    /events/sandboxes/{sandboxID}           one sandbox's events
//	POST   /events/webhooks                        register a webhook
//	GET    /events/webhooks                        list them
//	GET    /events/webhooks/{webhookID}            one
//	PATCH  /events/webhooks/{webhookID}            change it
//	DELETE /events/webhooks/{webhookID}            remove it
//	GET    /events/webhooks/{webhookID}/deliveries delivery history
//	POST   /events/webhooks/{webhookID}/deliveries/{deliveryID}/redeliver
//
// Event lists take limit (1–100, default 10), offset, orderAsc, type
// (repeatable or comma-separated), since and until (RFC 3339) and
// nextToken; a full page carries the next page's token in x-next-token.
func (s *Server) MountEvents(cfg EventsConfig) {
	if cfg.ValidateURL == nil {
		cfg.ValidateURL = validateHTTPURL
	}
	a := &eventsAPI{Server: s, cfg: cfg}
	team := func(h handlerFunc) http.Handler {
		return s.auth(func(w http.ResponseWriter, r *http.Request, c *caller) error {
			if c.teamID == "" {
				return errdefs.Publicf(errdefs.ErrInvalid, "X-Team-ID is required: events and webhooks belong to a team")
			}
			return h(w, r, c)
		}, false)
	}
	s.handle("GET /events/sandboxes", team(a.listEvents))
	s.handle("GET /events/sandboxes/{sandboxID}", team(a.listEvents))
	s.handle("POST /events/webhooks", team(a.createWebhook))
	s.handle("GET /events/webhooks", team(a.listWebhooks))
	s.handle("GET /events/webhooks/{webhookID}", team(a.getWebhook))
	s.handle("PATCH /events/webhooks/{webhookID}", team(a.updateWebhook))
	s.handle("DELETE /events/webhooks/{webhookID}", team(a.deleteWebhook))
	s.handle("GET /events/webhooks/{webhookID}/deliveries", team(a.listDeliveries))
	s.handle("POST /events/webhooks/{webhookID}/deliveries/{deliveryID}/redeliver", team(a.redeliver))
}

// eventToken is an events page cursor: the last event ID and the order.
func eventToken(id int64, asc bool) string {
	return base64.RawURLEncoding.EncodeToString(fmt.Appendf(nil, "e|%d|%t", id, asc))
}

func parseEventToken(tok string) (int64, bool, error) {
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err == nil {
		parts := strings.Split(string(b), "|")
		if len(parts) == 3 && parts[0] == "e" {
			id, err1 := strconv.ParseInt(parts[1], 10, 64)
			asc, err2 := strconv.ParseBool(parts[2])
			if err1 == nil && err2 == nil && id > 0 {
				return id, asc, nil
			}
		}
	}
	return 0, false, invalid("nextToken", "not a token this server issued")
}

// eventsAPI serves MountEvents' routes.
type eventsAPI struct {
	*Server
	cfg EventsConfig
}

func (s *eventsAPI) listEvents(w http.ResponseWriter, r *http.Request, c *caller) error {
	q := r.URL.Query()
	f := store.EventFilter{TeamID: c.teamID, SandboxID: r.PathValue("sandboxID"), Limit: 10}
	if f.SandboxID != "" {
		// Another team's sandbox is not found, as everywhere else (an
		// empty list would say it exists).
		if sb, err := s.st.GetSandbox(r.Context(), f.SandboxID); err != nil || sb.TeamID != c.teamID {
			return errSandboxNotFound(f.SandboxID)
		}
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			return invalid("limit", "must be an integer between 1 and 100, got %q", v)
		}
		f.Limit = n
	}
	if v := q.Get("offset"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return invalid("offset", "must be a non-negative integer, got %q", v)
		}
		f.Offset = n
	}
	asc := false
	if v := q.Get("orderAsc"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return invalid("orderAsc", "must be true or false, got %q", v)
		}
		asc = b
	}
	types, err := events.ParseTypes(q["type"])
	if err != nil {
		return err
	}
	f.Types = types
	for _, p := range []struct {
		name string
		dst  *time.Time
	}{{"since", &f.Since}, {"until", &f.Until}} {
		if v := q.Get(p.name); v != "" {
			t, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				return invalid(p.name, "must be an RFC 3339 time, got %q", v)
			}
			*p.dst = t
		}
	}
	if v := q.Get("nextToken"); v != "" {
		id, tokAsc, err := parseEventToken(v)
		if err != nil {
			return err
		}
		asc, f.Offset = tokAsc, 0
		if asc {
			f.AfterID = id
		} else {
			f.BeforeID = id
		}
	}
	f.Desc = !asc
	evs, err := s.st.QueryEvents(r.Context(), f)
	if err != nil {
		return err
	}
	out := make([]events.Payload, len(evs))
	for i, e := range evs {
		out[i] = events.PayloadOf(e)
	}
	if len(evs) == f.Limit {
		w.Header().Set("x-next-token", eventToken(evs[len(evs)-1].ID, asc))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
