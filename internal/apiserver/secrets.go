package apiserver

import (
	"encoding/base64"
	"net/http"
	"strconv"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/secrets"
	"github.com/warren-sandbox/warren/pkg/client"
)

// The secrets API (E2B's /secrets): a value goes in with create and
// update and never comes out; every answer is the secret's metadata. The
// handlers log names and IDs, never values.

func secretJSON(i *secrets.Info) client.Secret {
	return client.Secret{SecretID: i.ID, Name: i.Name, CurrentVersion: i.Version, Metadata: i.Metadata, CreatedAt: i.CreatedAt, UpdatedAt: i.UpdatedAt}
}

// secretBody is the body of create and update; Value is a pointer so that
// a missing value is told apart from an empty one.
type secretBody struct {
	Name     string            `json:"name"`
	Value    *string           `json:"value"`
	Metadata map[string]string `json:"metadata"`
}

// secretsTeam refuses an admin acting on no team: secrets are a team's.
func secretsTeam(c *caller) error {
	if c.teamID == "" {
		return errdefs.Publicf(errdefs.ErrInvalid, "secrets belong to a team: send X-Team-ID with the admin token")
	}
	return nil
}

func (s *Server) createSecret(w http.ResponseWriter, r *http.Request, c *caller) error {
	if err := secretsTeam(c); err != nil {
		return err
	}
	var b secretBody
	if err := decode(r, &b, true); err != nil {
		return err
	}
	if b.Value == nil {
		return invalid("value", "is required")
	}
	info, err := s.cfg.Secrets.Create(r.Context(), c.teamID, b.Name, *b.Value, b.Metadata)
	if err != nil {
		return err
	}
	s.log.Info("secret created", "team_id", c.teamID, "secret_id", info.ID, "secret_name", info.Name)
	writeJSON(w, http.StatusCreated, secretJSON(info))
	return nil
}

func (s *Server) updateSecret(w http.ResponseWriter, r *http.Request, c *caller) error {
	if err := secretsTeam(c); err != nil {
		return err
	}
	var b secretBody
	if err := decode(r, &b, true); err != nil {
		return err
	}
	if b.Value == nil {
		return invalid("value", "is required")
	}
	info, err := s.cfg.Secrets.Update(r.Context(), c.teamID, r.PathValue("secretID"), *b.Value, b.Metadata)
	if err != nil {
		return err
	}
	s.log.Info("secret updated", "team_id", c.teamID, "secret_id", info.ID, "secret_name", info.Name, "version", info.Version)
	writeJSON(w, http.StatusOK, secretJSON(info))
	return nil
}

func (s *Server) getSecret(w http.ResponseWriter, r *http.Request, c *caller) error {
	if err := secretsTeam(c); err != nil {
		return err
	}
	info, err := s.cfg.Secrets.Get(r.Context(), c.teamID, r.PathValue("secretID"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, secretJSON(info))
	return nil
}

func (s *Server) deleteSecret(w http.ResponseWriter, r *http.Request, c *caller) error {
	if err := secretsTeam(c); err != nil {
		return err
	}
	ref := r.PathValue("secretID")
	if err := s.cfg.Secrets.Delete(r.Context(), c.teamID, ref); err != nil {
		return err
	}
	s.log.Info("secret destroyed", "team_id", c.teamID, "secret", ref)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) listSecrets(w http.ResponseWriter, r *http.Request, c *caller) error {
	if err := secretsTeam(c); err != nil {
		return err
	}
	q := r.URL.Query()
	limit := 100
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			return invalid("limit", "must be an integer between 1 and 1000, got %q", v)
		}
		limit = n
	}
	after := ""
	if tok := q.Get("nextToken"); tok != "" {
		b, err := base64.RawURLEncoding.DecodeString(tok)
		if err != nil || len(b) == 0 {
			return invalid("nextToken", "not a token this server issued")
		}
		after = string(b)
	}
	infos, more, err := s.cfg.Secrets.List(r.Context(), c.teamID, after, limit)
	if err != nil {
		return err
	}
	out := make([]client.Secret, len(infos))
	for i, info := range infos {
		out[i] = secretJSON(info)
	}
	if more && len(infos) > 0 {
		w.Header().Set("X-Next-Token", base64.RawURLEncoding.EncodeToString([]byte(infos[len(infos)-1].Name)))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// egressLog serves GET /sandboxes/{id}/egress: what the sandbox tried to
// reach through its node's egress proxy (docs/api.md).
func (s *Server) egressLog(w http.ResponseWriter, r *http.Request, c *caller) error {
	id := r.PathValue("id")
	es, err := s.lc.EgressLog(r.Context(), c.teamID, id)
	if err != nil {
		if errdefs.IsUnsupported(err) {
			return errdefs.WithMessage(err, "this server's nodes keep no egress log")
		}
		return sandboxErr(id, err)
	}
	out := make([]client.EgressEntry, len(es))
	for i, e := range es {
		d := "denied"
		if e.Allowed {
			d = "allowed"
		}
		out[i] = client.EgressEntry{Timestamp: e.Time, Proto: e.Proto, Host: e.Host, Addr: e.Addr, Port: e.Port, Decision: d,
			Reason: e.Reason, BytesOut: e.BytesOut, BytesIn: e.BytesIn, DurationMs: e.Duration.Milliseconds(), Open: e.Open}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
