package apiserver

import (
	"net/http"
	"strconv"
	"time"

	"github.com/warren-sandbox/warren/internal/events"
	"github.com/warren-sandbox/warren/internal/store"
	"github.com/warren-sandbox/warren/internal/webhooks"
)

// webhookJSON is a webhook as the API shows it; the secret is never
// returned.
type webhookJSON struct {
	ID        string    `json:"id"`
	TeamID    string    `json:"teamID"`
	Name      string    `json:"name"`
	URL       string    `json:"url"`
	Enabled   bool      `json:"enabled"`
	Events    []string  `json:"events"`
	CreatedAt time.Time `json:"createdAt"`
	UpdatedAt time.Time `json:"updatedAt"`
}

func webhookOf(w *store.Webhook) webhookJSON {
	evs := make([]string, len(w.Events))
	for i, e := range w.Events {
		evs[i] = events.TypePrefix + e
	}
	return webhookJSON{ID: w.ID, TeamID: w.TeamID, Name: w.Name, URL: w.URL, Enabled: w.Enabled, Events: evs,
		CreatedAt: w.CreatedAt, UpdatedAt: w.UpdatedAt}
}

// webhookBody is the body of POST and PATCH; PATCH changes the fields given.
type webhookBody struct {
	Name            *string  `json:"name"`
	URL             *string  `json:"url"`
	Enabled         *bool    `json:"enabled"`
	Events          []string `json:"events"`
	SignatureSecret *string  `json:"signatureSecret"`
}

func (b *webhookBody) apply(a *eventsAPI, w *store.Webhook) error {
	if b.Name != nil {
		w.Name = *b.Name
	}
	if b.URL != nil {
		if err := a.cfg.ValidateURL(*b.URL); err != nil {
			return err
		}
		w.URL = *b.URL
	}
	if b.Enabled != nil {
		w.Enabled = *b.Enabled
	}
	if b.Events != nil {
		types, err := events.ParseTypes(b.Events)
		if err != nil {
			return err
		}
		w.Events = types
	}
	if b.SignatureSecret != nil {
		if len(*b.SignatureSecret) < 8 {
			return invalid("signatureSecret", "must be at least 8 characters")
		}
		w.Secret = *b.SignatureSecret
	}
	return nil
}

func validateHTTPURL(u string) error { return webhooks.ValidateURL(u) }

func (a *eventsAPI) createWebhook(w http.ResponseWriter, r *http.Request, c *caller) error {
	var b webhookBody
	if err := decode(r, &b, true); err != nil {
		return err
	}
	switch {
	case b.URL == nil:
		return invalid("url", "is required")
	case b.SignatureSecret == nil:
		return invalid("signatureSecret", "is required")
	}
	hook := &store.Webhook{ID: store.NewUID(), TeamID: c.teamID, Enabled: true}
	if err := b.apply(a, hook); err != nil {
		return err
	}
	// The team's webhooks are bounded (maxWebhooks): counted with the
	// insert, so parallel creates cannot pass the bound.
	if err := a.st.CreateWebhookWithin(r.Context(), hook, a.limits(c).MaxWebhooks); err != nil {
		return err
	}
	a.log.Info("webhook registered", "team_id", c.teamID, "webhook_id", hook.ID, "events", hook.Events)
	writeJSON(w, http.StatusCreated, webhookOf(hook))
	return nil
}

func (a *eventsAPI) listWebhooks(w http.ResponseWriter, r *http.Request, c *caller) error {
	hooks, err := a.st.ListWebhooks(r.Context(), c.teamID)
	if err != nil {
		return err
	}
	out := make([]webhookJSON, len(hooks))
	for i, h := range hooks {
		out[i] = webhookOf(h)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (a *eventsAPI) getWebhook(w http.ResponseWriter, r *http.Request, c *caller) error {
	hook, err := a.st.GetWebhook(r.Context(), c.teamID, r.PathValue("webhookID"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, webhookOf(hook))
	return nil
}

func (a *eventsAPI) updateWebhook(w http.ResponseWriter, r *http.Request, c *caller) error {
	hook, err := a.st.GetWebhook(r.Context(), c.teamID, r.PathValue("webhookID"))
	if err != nil {
		return err
	}
	var b webhookBody
	if err := decode(r, &b, true); err != nil {
		return err
	}
	if err := b.apply(a, hook); err != nil {
		return err
	}
	if err := a.st.UpdateWebhook(r.Context(), hook); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, webhookOf(hook))
	return nil
}

func (a *eventsAPI) deleteWebhook(w http.ResponseWriter, r *http.Request, c *caller) error {
	if err := a.st.DeleteWebhook(r.Context(), c.teamID, r.PathValue("webhookID")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// deliveryJSON is one delivery in the history.
type deliveryJSON struct {
	ID          string     `json:"id"`
	WebhookID   string     `json:"webhookID"`
	EventID     string     `json:"eventID,omitempty"`
	EventType   string     `json:"eventType,omitempty"`
	SandboxID   string     `json:"sandboxID,omitempty"`
	State       string     `json:"state"`
	Attempts    int        `json:"attempts"`
	NextAttempt *time.Time `json:"nextAttemptAt,omitempty"`
	LastStatus  int        `json:"lastStatus,omitempty"`
	LastError   string     `json:"lastError,omitempty"`
	CreatedAt   time.Time  `json:"createdAt"`
	DeliveredAt *time.Time `json:"deliveredAt,omitempty"`
}

func (a *eventsAPI) deliveryOf(r *http.Request, d *store.Delivery) deliveryJSON {
	out := deliveryJSON{ID: d.ID, WebhookID: d.WebhookID, State: d.State, Attempts: d.Attempts,
		LastStatus: d.LastStatus, LastError: d.LastError, CreatedAt: d.CreatedAt}
	if d.State == store.DeliveryPending {
		out.NextAttempt = &d.NextAt
	}
	if !d.DeliveredAt.IsZero() {
		out.DeliveredAt = &d.DeliveredAt
	}
	if e, err := a.st.GetEvent(r.Context(), d.EventID); err == nil {
		out.EventID, out.EventType, out.SandboxID = e.UID, events.TypePrefix+e.Type, e.SandboxID
	}
	return out
}

func (a *eventsAPI) listDeliveries(w http.ResponseWriter, r *http.Request, c *caller) error {
	id := r.PathValue("webhookID")
	if _, err := a.st.GetWebhook(r.Context(), c.teamID, id); err != nil {
		return err
	}
	limit := 100
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			return invalid("limit", "must be an integer between 1 and 1000, got %q", v)
		}
		limit = n
	}
	ds, err := a.st.ListDeliveries(r.Context(), c.teamID, id, limit)
	if err != nil {
		return err
	}
	out := make([]deliveryJSON, len(ds))
	for i, d := range ds {
		out[i] = a.deliveryOf(r, d)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (a *eventsAPI) redeliver(w http.ResponseWriter, r *http.Request, c *caller) error {
	d, err := a.st.Redeliver(r.Context(), c.teamID, r.PathValue("webhookID"), r.PathValue("deliveryID"))
	if err != nil {
		return err
	}
	if a.cfg.Poke != nil {
		a.cfg.Poke()
	}
	a.log.Info("webhook redelivery requested", "team_id", c.teamID, "webhook_id", d.WebhookID, "delivery_id", d.ID)
	writeJSON(w, http.StatusAccepted, a.deliveryOf(r, d))
	return nil
}
