package apiserver

import (
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/warren-sandbox/warren/internal/awsauth"
	"github.com/warren-sandbox/warren/internal/builder"
	"github.com/warren-sandbox/warren/internal/envdproto"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/templates"
	"github.com/warren-sandbox/warren/pkg/client"
)

// E2B's template build API (docs/api.md, "Templates"), served when
// Config.Builds and Config.Catalog are set. Builds run in the background in
// builder.Service; COPY contexts are PUT to the service's upload handler,
// whose signed URL GET /templates/{id}/files/{hash} hands out.

func (s *Server) templateRoutes(team func(handlerFunc) http.Handler) {
	if s.cfg.Builds == nil || s.cfg.Catalog == nil {
		return
	}
	s.handle("POST /v3/templates", team(s.createTemplate))
	s.handle("GET /templates/{id}/files/{hash}", team(s.templateFiles))
	s.handle("POST /v2/templates/{id}/builds/{buildID}", team(s.startBuild))
	s.handle("GET /templates/{id}/builds/{buildID}/status", team(s.buildStatus))
	s.handle("GET /templates/{id}/builds/{buildID}/logs", team(s.buildLogs))
	s.handle("GET /templates", team(s.listTemplates))
	s.handle("GET /v2/templates", team(s.listTemplatesV2))
	s.handle("GET /templates/{id}", team(s.getTemplate))
	s.handle("DELETE /templates/{id}", team(s.deleteTemplate))
	s.handle("PATCH /templates/{id}", team(s.patchTemplate))
	s.handle("PATCH /v2/templates/{id}", team(s.patchTemplate))
	s.handle("POST /templates/tags", team(s.assignTags))
	s.handle("DELETE /templates/tags", team(s.deleteTags))
	// GET /templates/aliases/{alias} and GET /templates/{id}/tags overlap
	// for the mux: one route tells them apart.
	s.handle("GET /templates/{a}/{b}", team(func(w http.ResponseWriter, r *http.Request, c *caller) error {
		switch a, b := r.PathValue("a"), r.PathValue("b"); {
		case a == "aliases":
			return s.templateAlias(w, r, c, b)
		case b == "tags":
			return s.listTags(w, r, c, a)
		default:
			return errNoRoute(r)
		}
	}))
}

// Template routes act for the caller's team; the admin token without
// X-Team-ID acts as the operator on system templates (no team: base, and
// the ones the operator builds, which every team may use, under any name
// including the reserved ones).
//
// A template is inspected and changed by its owner only
// (templates.Catalog.Owned). Another team's public template is usable,
// not inspectable: a team may create sandboxes of it and build from it
// (by ID or team/name, with a tag) and resolve its name
// (GET /templates/aliases/{name}: its ID and public flag); every other
// route (get with its builds, tags, build status and logs, uploads,
// builds, publish, delete, tag changes) answers 404, as for a template
// that does not exist. The lists show the caller's own templates only.

// templateErr is err of an operation on template id, as its client is
// told of it.
func templateErr(id string, err error) error {
	switch {
	case errdefs.IsNotFound(err):
		return errdefs.WithMessage(err, fmt.Sprintf("template '%s' not found", id))
	case errors.Is(err, errdefs.ErrForbidden):
		return errdefs.WithMessage(err, fmt.Sprintf("you don't have access to template '%s'", id))
	}
	return err
}

// The template routes encode and decode pkg/client's types, the one
// definition of their wire shapes (api/warren-openapi.json describes them;
// openapi_test.go holds both to it). Fields of a request body they do not
// name (teamID, anything newer) are ignored.

// diskMB is the disk size to record for req: minFreeDiskMb when it is
// above the default, else 0 (the catalog's default).
func diskMB(req client.NewTemplate) (int64, error) {
	if req.MinFreeDiskMB == nil {
		return 0, nil
	}
	if v := *req.MinFreeDiskMB; v < 0 {
		return 0, invalid("minFreeDiskMb", "must not be negative, got %d", v)
	} else if v > templates.DefaultDiskMB {
		return v, nil
	}
	return 0, nil
}

func (s *Server) createTemplate(w http.ResponseWriter, r *http.Request, c *caller) error {
	var req client.NewTemplate
	if err := decode(r, &req, true); err != nil {
		return err
	}
	name := req.Name
	if name == "" {
		name = req.Alias
	}
	if strings.TrimSpace(name) == "" {
		return invalid("name", "required")
	}
	if err := cmp.Or(checkRef("name", name), checkTags("tags", req.Tags)); err != nil {
		return err
	}
	disk, err := diskMB(req)
	if err != nil {
		return err
	}
	lim := s.limits(c)
	if lim.MaxDiskMB > 0 && disk > lim.MaxDiskMB {
		return invalid("minFreeDiskMb", "%d MiB is more than the team's disk limit of %d MiB (a sandbox's disk)", disk, lim.MaxDiskMB)
	}
	t, b, err := s.cfg.Builds.CreateTemplate(r.Context(), templates.CreateRequest{
		TeamID: c.teamID, Name: name, Tags: req.Tags, CPUCount: req.CPUCount, MemoryMB: req.MemoryMB, DiskMB: disk,
		Limits: templates.Limits{MaxCPU: lim.MaxVCPUs, MaxMemoryMB: lim.MaxMemoryMB},
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusAccepted, client.TemplateCreated{
		TemplateID: t.ID, BuildID: b.ID, Public: t.Public, Names: names(t), Tags: nonNil(b.Tags), Aliases: nonNil(t.Aliases),
	})
	return nil
}

func names(t *templates.Template) []string { return nonNil(slices.Clone(t.Aliases)) }

func nonNil[T any](v []T) []T {
	if v == nil {
		return []T{}
	}
	return v
}

// baseURL is the absolute URL clients reach this API at: the configured
// public URL, or the request's scheme and Host.
func (s *Server) baseURL(r *http.Request) string {
	if s.cfg.PublicURL != "" {
		return strings.TrimSuffix(s.cfg.PublicURL, "/")
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	if p := r.Header.Get("X-Forwarded-Proto"); p == "http" || p == "https" {
		scheme = p
	}
	return scheme + "://" + r.Host
}

func (s *Server) templateFiles(w http.ResponseWriter, r *http.Request, c *caller) error {
	id := r.PathValue("id")
	present, path, err := s.cfg.Builds.Files(r.Context(), c.teamID, id, r.PathValue("hash"))
	if err != nil {
		return templateErr(id, err)
	}
	out := client.FilesUpload{Present: present}
	if !present {
		out.URL = s.baseURL(r) + path
	}
	writeJSON(w, http.StatusCreated, out)
	return nil
}

// The body of a build start (E2B's TemplateBuildStartV2) is
// client.TemplateBuild; its steps' Expand is a Warren extension the E2B
// SDK never sends: it asks for Dockerfile variable expansion of the
// step's arguments when it runs, from the build's environment at that
// point (the base image's ENV, earlier ENV and ARG steps). Without it
// (E2B's behaviour) arguments are taken as written.

// registryAuthOf turns the SDK's registry credentials into the basic auth
// a registry takes: a username and password as given (type registry),
// Google's _json_key user with the service account key (type gcp: the
// SDK's fromGCPRegistry; GCR and Artifact Registry accept it), or, for
// type aws (fromAWSRegistry), the AWS key and region the builder exchanges
// with ECR's GetAuthorizationToken for the password of user AWS when the
// build pulls, so refused keys fail the build with ECR's message.
func registryAuthOf(a *client.RegistryAuth) (*builder.RegistryAuth, error) {
	switch a.Type {
	case "", "registry":
		return &builder.RegistryAuth{Username: a.Username, Password: a.Password}, nil
	case "gcp":
		if strings.TrimSpace(a.ServiceAccountJSON) == "" {
			return nil, invalid("fromImageRegistry.serviceAccountJson", "required for a gcp registry")
		}
		return &builder.RegistryAuth{Username: "_json_key", Password: a.ServiceAccountJSON}, nil
	case "aws":
		switch {
		case a.AWSAccessKeyID == "":
			return nil, invalid("fromImageRegistry.awsAccessKeyId", "required for an aws registry")
		case a.AWSSecretAccessKey == "":
			return nil, invalid("fromImageRegistry.awsSecretAccessKey", "required for an aws registry")
		case a.AWSRegion == "":
			return nil, invalid("fromImageRegistry.awsRegion", "required for an aws registry")
		case !awsauth.ValidRegion(a.AWSRegion):
			return nil, invalid("fromImageRegistry.awsRegion", "%q is not an AWS region name (like us-east-1)", a.AWSRegion)
		}
		return &builder.RegistryAuth{ECR: &awsauth.ECR{
			Credentials: awsauth.Credentials{AccessKeyID: a.AWSAccessKeyID, SecretAccessKey: a.AWSSecretAccessKey},
			Region:      a.AWSRegion,
		}}, nil
	}
	return nil, invalid("fromImageRegistry.type", "%q registries are not supported by this server (use registry with a username and password, gcp with a service account key, or aws with an access key and region)", a.Type)
}

func (s *Server) startBuild(w http.ResponseWriter, r *http.Request, c *caller) error {
	id, buildID := r.PathValue("id"), r.PathValue("buildID")
	var req client.TemplateBuild
	if err := decode(r, &req, true); err != nil {
		return err
	}
	if req.FromImage != "" && req.FromTemplate != "" {
		return invalid("fromTemplate", "give fromImage or fromTemplate, not both")
	}
	lim := s.limits(c)
	spec := builder.Spec{FromImage: req.FromImage, FromTemplate: req.FromTemplate, StartCmd: req.StartCmd, ReadyCmd: req.ReadyCmd, Force: req.Force,
		Team: builder.TeamLimits{Builds: lim.MaxBuilds, StorageMB: lim.MaxTemplateStorageMB}}
	if a := req.FromImageRegistry; a != nil {
		auth, err := registryAuthOf(a)
		if err != nil {
			return err
		}
		spec.RegistryAuth = auth
	}
	for i, st := range req.Steps {
		if st.Type == "" {
			return invalid(fmt.Sprintf("steps[%d].type", i), "required")
		}
		spec.Steps = append(spec.Steps, builder.Step{Type: strings.ToUpper(st.Type), Args: st.Args, Force: st.Force, FilesHash: st.FilesHash, Expand: st.Expand})
	}
	_, err := s.cfg.Builds.StartBuild(r.Context(), builder.StartRequest{TeamID: c.teamID, TemplateID: id, BuildID: buildID, Spec: spec})
	if err != nil {
		if errdefs.IsNotFound(err) {
			return errdefs.Publicf(errdefs.ErrNotFound, "template '%s' or its build '%s' not found", id, buildID)
		}
		return templateErr(id, err)
	}
	w.Header().Set("Content-Length", "0")
	w.WriteHeader(http.StatusAccepted)
	return nil
}

func logEntries(in []templates.LogEntry) []client.BuildLogEntry {
	out := make([]client.BuildLogEntry, 0, len(in))
	for _, e := range in {
		out = append(out, client.BuildLogEntry{Timestamp: e.Timestamp.UTC(), Level: string(e.Level), Message: e.Message, Step: e.Step})
	}
	return out
}

func (s *Server) buildStatus(w http.ResponseWriter, r *http.Request, c *caller) error {
	id, buildID := r.PathValue("id"), r.PathValue("buildID")
	q := r.URL.Query()
	offset := 0
	if v := q.Get("logsOffset"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return invalid("logsOffset", "must be a non-negative integer, got %q", v)
		}
		offset = n
	}
	minLevel, err := parseLevel(q.Get("level"))
	if err != nil {
		return err
	}
	st, err := s.cfg.Builds.Status(r.Context(), c.teamID, id, buildID, offset)
	if err != nil {
		return buildErr(id, buildID, err)
	}
	entries := st.LogEntries
	if minLevel != "" {
		entries = slices.DeleteFunc(slices.Clone(entries), func(e templates.LogEntry) bool { return levelRank[e.Level] < levelRank[minLevel] })
	}
	out := client.TemplateBuildInfo{TemplateID: st.TemplateID, BuildID: st.BuildID, Status: string(st.Status), Logs: []string{}, LogEntries: logEntries(entries)}
	for _, e := range entries {
		out.Logs = append(out.Logs, e.Message)
	}
	if st.Reason != nil {
		out.Reason = &client.BuildReason{Message: st.Reason.Message, Step: st.Reason.Step, LogEntries: []client.BuildLogEntry{}}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// buildErr is err of an operation on build buildID of template id, as its
// client is told of it.
func buildErr(id, buildID string, err error) error {
	if errdefs.IsNotFound(err) {
		return errdefs.WithMessage(err, fmt.Sprintf("build '%s' of template '%s' not found", buildID, id))
	}
	return templateErr(id, err)
}

var levelRank = map[templates.LogLevel]int{templates.LogDebug: 0, templates.LogInfo: 1, templates.LogWarn: 2, templates.LogError: 3}

func parseLevel(v string) (templates.LogLevel, error) {
	if v == "" {
		return "", nil
	}
	l := templates.LogLevel(v)
	if _, ok := levelRank[l]; !ok {
		return "", invalid("level", "must be debug, info, warn or error, got %q", v)
	}
	return l, nil
}

func (s *Server) buildLogs(w http.ResponseWriter, r *http.Request, c *caller) error {
	id, buildID := r.PathValue("id"), r.PathValue("buildID")
	q := r.URL.Query()
	var lq builder.LogsQuery
	if v := q.Get("cursor"); v != "" {
		ms, err := strconv.ParseInt(v, 10, 64)
		if err != nil || ms < 0 {
			return invalid("cursor", "must be a timestamp in milliseconds, got %q", v)
		}
		lq.Cursor = time.UnixMilli(ms)
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 100 {
			return invalid("limit", "must be an integer between 0 and 100, got %q", v)
		}
		lq.Limit = n
	}
	switch v := q.Get("direction"); v {
	case "", "forward":
	case "backward":
		lq.Backward = true
	default:
		return invalid("direction", "must be forward or backward, got %q", v)
	}
	lvl, err := parseLevel(q.Get("level"))
	if err != nil {
		return err
	}
	lq.MinLevel = lvl
	entries, err := s.cfg.Builds.Logs(r.Context(), c.teamID, id, buildID, lq)
	if err != nil {
		return buildErr(id, buildID, err)
	}
	writeJSON(w, http.StatusOK, client.BuildLogs{Logs: logEntries(entries)})
	return nil
}

func (s *Server) templateOf(ctx context.Context, t *templates.Template) (client.Template, error) {
	out := client.Template{
		TemplateID: t.ID, CPUCount: t.CPUCount, MemoryMB: t.MemoryMB, DiskSizeMB: t.DiskMB, Public: t.Public,
		Aliases: names(t), Names: names(t), CreatedAt: t.CreatedAt.UTC(), UpdatedAt: t.UpdatedAt.UTC(), BuildStatus: string(templates.BuildWaiting),
	}
	builds, err := s.cfg.Catalog.Builds(ctx, t.ID)
	if err != nil {
		return out, err
	}
	out.BuildCount = len(builds)
	if len(builds) > 0 {
		last := builds[len(builds)-1]
		out.BuildStatus = string(last.Status)
	}
	if tg, ok := t.Tags[templates.DefaultTag]; ok {
		out.BuildID = tg.BuildID
	}
	for _, b := range builds {
		if b.ID == out.BuildID || (out.BuildID == "" && b.Status == templates.BuildReady) {
			out.EnvdVersion = b.EnvdVersion
			if out.BuildID == "" {
				out.BuildID = b.ID
			}
		}
	}
	if out.EnvdVersion == "" {
		out.EnvdVersion = defaultEnvdVersion
	}
	return out, nil
}

// defaultEnvdVersion is reported for templates whose build did not record
// the envd it was made with: every sandbox runs the node's envd.
const defaultEnvdVersion = envdproto.Version

// teamTemplates returns the templates team owns, oldest first.
func (s *Server) teamTemplates(ctx context.Context, teamID string) ([]client.Template, error) {
	all, err := s.cfg.Catalog.List(ctx, teamID)
	if err != nil {
		return nil, err
	}
	out := make([]client.Template, 0, len(all))
	for _, t := range all {
		if teamID == "" && t.TeamID != "" {
			continue
		}
		j, err := s.templateOf(ctx, t)
		if err != nil {
			return nil, err
		}
		out = append(out, j)
	}
	return out, nil
}

func (s *Server) listTemplates(w http.ResponseWriter, r *http.Request, c *caller) error {
	out, err := s.teamTemplates(r.Context(), s.listTeam(r, c))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// listTeam is the team whose templates a list shows: the caller's (an
// admin may name one with ?teamID).
func (s *Server) listTeam(r *http.Request, c *caller) string {
	if c.admin {
		if v := r.URL.Query().Get("teamID"); v != "" {
			return v
		}
	}
	if c.teamID == "" {
		return "\x00none"
	}
	return c.teamID
}

// pageOf cuts items to a page of limit from the offset in the nextToken
// query parameter and sets X-Next-Token when more remain.
func pageOf[T any](w http.ResponseWriter, r *http.Request, items []T) ([]T, error) {
	q := r.URL.Query()
	limit := 100
	if v := q.Get("limit"); v != "" {
		n, err := parseLimit(v)
		if err != nil {
			return nil, err
		}
		limit = n
	}
	off := 0
	if v := q.Get("nextToken"); v != "" {
		b, err := base64.RawURLEncoding.DecodeString(v)
		n, perr := strconv.Atoi(strings.TrimPrefix(string(b), "o:"))
		if err != nil || perr != nil || !strings.HasPrefix(string(b), "o:") || n < 0 {
			return nil, invalid("nextToken", "not a token this server issued")
		}
		off = n
	}
	if off > len(items) {
		off = len(items)
	}
	end := min(off+limit, len(items))
	if end < len(items) {
		w.Header().Set("X-Next-Token", base64.RawURLEncoding.EncodeToString([]byte("o:"+strconv.Itoa(end))))
	}
	return items[off:end], nil
}

func (s *Server) listTemplatesV2(w http.ResponseWriter, r *http.Request, c *caller) error {
	all, err := s.teamTemplates(r.Context(), s.listTeam(r, c))
	if err != nil {
		return err
	}
	page, err := pageOf(w, r, all)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, page)
	return nil
}

func (s *Server) getTemplate(w http.ResponseWriter, r *http.Request, c *caller) error {
	id := r.PathValue("id")
	t, err := s.cfg.Catalog.Owned(r.Context(), c.teamID, id)
	if err != nil {
		return templateErr(id, err)
	}
	builds, err := s.cfg.Catalog.Builds(r.Context(), t.ID)
	if err != nil {
		return err
	}
	bs := make([]client.TemplateBuildSummary, 0, len(builds))
	for i := len(builds) - 1; i >= 0; i-- { // newest first
		b := builds[i]
		j := client.TemplateBuildSummary{
			BuildID: b.ID, Status: string(b.Status), CreatedAt: b.CreatedAt.UTC(), UpdatedAt: b.UpdatedAt.UTC(),
			CPUCount: b.CPUCount, MemoryMB: b.MemoryMB, DiskSizeMB: b.DiskMB, EnvdVersion: b.EnvdVersion,
		}
		if !b.FinishedAt.IsZero() {
			f := b.FinishedAt.UTC()
			j.FinishedAt = &f
		}
		bs = append(bs, j)
	}
	page, err := pageOf(w, r, bs)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, client.TemplateWithBuilds{
		TemplateID: t.ID, Public: t.Public, Aliases: names(t), Names: names(t),
		CreatedAt: t.CreatedAt.UTC(), UpdatedAt: t.UpdatedAt.UTC(), Builds: page,
	})
	return nil
}

func (s *Server) deleteTemplate(w http.ResponseWriter, r *http.Request, c *caller) error {
	id := r.PathValue("id")
	ctx := r.Context()
	name, _ := templates.ParseRef(id)
	t, err := s.cfg.Catalog.Owned(ctx, c.teamID, name)
	if err != nil {
		return templateErr(id, err)
	}
	// The builds' files (trees, memory snapshots and their saved layers)
	// stay: a paused sandbox, a warm pool or a create that resolved the
	// template just before may still use them. The template collector
	// (builder.GC) frees them once nothing does, after its grace period.
	if err := s.cfg.Catalog.Delete(ctx, c.teamID, t.ID); err != nil {
		return templateErr(id, err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) patchTemplate(w http.ResponseWriter, r *http.Request, c *caller) error {
	id := r.PathValue("id")
	var req client.TemplateUpdate
	if err := decode(r, &req, true); err != nil {
		return err
	}
	var t *templates.Template
	var err error
	if req.Public != nil {
		t, err = s.cfg.Catalog.SetPublic(r.Context(), c.teamID, id, *req.Public)
	} else {
		t, err = s.cfg.Catalog.Owned(r.Context(), c.teamID, id)
	}
	if err != nil {
		return templateErr(id, err)
	}
	writeJSON(w, http.StatusOK, client.TemplateNames{Names: names(t)})
	return nil
}

func (s *Server) templateAlias(w http.ResponseWriter, r *http.Request, c *caller, alias string) error {
	// Resolved as a create would: another team's name is not found (not
	// 403), so a template's existence does not leak across teams.
	t, err := s.cfg.Catalog.Find(r.Context(), c.teamID, alias)
	if err != nil {
		return templateErr(alias, err)
	}
	writeJSON(w, http.StatusOK, client.TemplateAlias{TemplateID: t.ID, Public: t.Public})
	return nil
}

func (s *Server) assignTags(w http.ResponseWriter, r *http.Request, c *caller) error {
	var req client.TagsRequest
	if err := decode(r, &req, true); err != nil {
		return err
	}
	if req.Target == "" {
		return invalid("target", "required")
	}
	if len(req.Tags) == 0 {
		return invalid("tags", "at least one tag is required")
	}
	if err := cmp.Or(checkRef("target", req.Target), checkTags("tags", req.Tags)); err != nil {
		return err
	}
	buildID, err := s.cfg.Catalog.AssignTags(r.Context(), c.teamID, req.Target, req.Tags)
	if err != nil {
		return templateErr(req.Target, err)
	}
	writeJSON(w, http.StatusCreated, client.TagsAssigned{BuildID: buildID, Tags: req.Tags})
	return nil
}

func (s *Server) deleteTags(w http.ResponseWriter, r *http.Request, c *caller) error {
	var req client.TagsRequest
	if err := decode(r, &req, true); err != nil {
		return err
	}
	if req.Name == "" {
		return invalid("name", "required")
	}
	if len(req.Tags) == 0 {
		return invalid("tags", "at least one tag is required")
	}
	if err := cmp.Or(checkRef("name", req.Name), checkTags("tags", req.Tags)); err != nil {
		return err
	}
	if err := s.cfg.Catalog.DeleteTags(r.Context(), c.teamID, req.Name, req.Tags); err != nil {
		if errdefs.IsNotFound(err) {
			return err
		}
		return templateErr(req.Name, err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) listTags(w http.ResponseWriter, r *http.Request, c *caller, id string) error {
	tags, err := s.cfg.Catalog.ListTags(r.Context(), c.teamID, id)
	if err != nil {
		return templateErr(id, err)
	}
	out := make([]client.TemplateTag, 0, len(tags))
	for _, tg := range tags {
		out = append(out, client.TemplateTag{Tag: tg.Tag, BuildID: tg.BuildID, CreatedAt: tg.CreatedAt.UTC()})
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
