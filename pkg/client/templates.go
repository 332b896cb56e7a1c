package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// E2B's template build API (what the SDKs' Template.build() calls), in the
// order a build uses it:
//
//	created, _ := c.CreateTemplate(ctx, client.NewTemplate{Name: "myapp"})
//	up, _ := c.TemplateFiles(ctx, created.TemplateID, hash)   // per COPY step
//	if !up.Present { c.UploadFiles(ctx, up, gzippedTar, size) }
//	c.StartTemplateBuild(ctx, created.TemplateID, created.BuildID, client.TemplateBuild{Steps: ...})
//	info, _ := c.WaitTemplateBuild(ctx, created.TemplateID, created.BuildID, 0, printEntry)

// Build statuses of TemplateBuildInfo.Status.
const (
	BuildWaiting  = "waiting"
	BuildBuilding = "building"
	BuildReady    = "ready"
	BuildError    = "error"
)

// NewTemplate is the body of POST /v3/templates. Name is "alias" or
// "alias:tag"; an existing name of the team gets a new build. Alias is the
// older SDKs' field for Name, taken when Name is empty. MinFreeDiskMB (the
// SDK's and CLI's --min-free-disk-mb) is the free space wanted after the
// build steps: it raises the template's disk size and never lowers it.
type NewTemplate struct {
	Name          string   `json:"name"`
	Alias         string   `json:"alias,omitempty"`
	Tags          []string `json:"tags,omitempty"`
	CPUCount      *int     `json:"cpuCount,omitempty"`
	MemoryMB      *int64   `json:"memoryMB,omitempty"`
	MinFreeDiskMB *int64   `json:"minFreeDiskMb,omitempty"`
}

// TemplateCreated is the answer to POST /v3/templates: the template and
// its new build, waiting for StartTemplateBuild.
type TemplateCreated struct {
	TemplateID string   `json:"templateID"`
	BuildID    string   `json:"buildID"`
	Public     bool     `json:"public"`
	Names      []string `json:"names"`
	Tags       []string `json:"tags"`
	Aliases    []string `json:"aliases"`
}

// FilesUpload is the answer to GET /templates/{id}/files/{hash}: whether
// the server has the COPY context with that hash, and if not where to PUT
// it (a gzip'd tar).
type FilesUpload struct {
	Present bool              `json:"present"`
	URL     string            `json:"url,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
}

// TemplateStep is one build step with E2B's argument layout:
//
//	RUN     [cmd] or [cmd, user]
//	COPY    [src, dest, user|"", mode-octal|""]   (files in FilesHash)
//	ENV     [k1, v1, k2, v2, ...]
//	WORKDIR [dir]
//	USER    [user]
//
// Warren also takes ADD (like COPY) and ARG [name, value].
//
// Expand is a Warren extension (E2B's servers ignore it): the server
// expands Dockerfile variables ($VAR, ${VAR}, ${VAR:-default}) in the
// arguments when the step runs, from the build's environment at that
// point — the base image's ENV, earlier ENV and ARG steps — in ENV
// values, an ARG's value, COPY/ADD source, destination and user, WORKDIR
// and USER. Without it arguments are taken as written.
type TemplateStep struct {
	Type      string   `json:"type"`
	Args      []string `json:"args"`
	Force     bool     `json:"force"`
	FilesHash string   `json:"filesHash,omitempty"`
	Expand    bool     `json:"expand,omitempty"`
}

// RegistryAuth is the credential for a private FromImage registry: a
// username and password (Type "registry"), a Google service account key
// (Type "gcp", the SDK's fromGCPRegistry), or an AWS access key and the
// region of an ECR registry (Type "aws", the SDK's fromAWSRegistry).
type RegistryAuth struct {
	Type               string `json:"type"`
	Username           string `json:"username,omitempty"`
	Password           string `json:"password,omitempty"`
	ServiceAccountJSON string `json:"serviceAccountJson,omitempty"`
	AWSAccessKeyID     string `json:"awsAccessKeyId,omitempty"`
	AWSSecretAccessKey string `json:"awsSecretAccessKey,omitempty"`
	AWSRegion          string `json:"awsRegion,omitempty"`
}

// TemplateBuild is the body of POST /v2/templates/{id}/builds/{buildID}.
// FromImage (any OCI registry) and FromTemplate (an alias[:tag] or ID) are
// exclusive; neither means the base template.
type TemplateBuild struct {
	FromImage         string         `json:"fromImage,omitempty"`
	FromTemplate      string         `json:"fromTemplate,omitempty"`
	FromImageRegistry *RegistryAuth  `json:"fromImageRegistry,omitempty"`
	Force             bool           `json:"force"`
	Steps             []TemplateStep `json:"steps"`
	StartCmd          string         `json:"startCmd,omitempty"`
	ReadyCmd          string         `json:"readyCmd,omitempty"`
}

// BuildLogEntry is one line of a build's log. Step is the step number
// ("1", "2", ...) or a phase ("base", "finalize", "ready", "snapshot");
// empty for lines about the whole build.
type BuildLogEntry struct {
	Timestamp time.Time `json:"timestamp"`
	Level     string    `json:"level"`
	Message   string    `json:"message"`
	Step      string    `json:"step,omitempty"`
}

// BuildReason says why a build failed. The server sends LogEntries
// empty: the build's lines are in TemplateBuildInfo.LogEntries.
type BuildReason struct {
	Message    string          `json:"message"`
	Step       string          `json:"step,omitempty"`
	LogEntries []BuildLogEntry `json:"logEntries"`
}

// TemplateBuildInfo is the answer to GET
// /templates/{id}/builds/{buildID}/status. Logs are the messages of
// LogEntries (the older SDKs read them).
type TemplateBuildInfo struct {
	TemplateID string          `json:"templateID"`
	BuildID    string          `json:"buildID"`
	Status     string          `json:"status"`
	Logs       []string        `json:"logs"`
	LogEntries []BuildLogEntry `json:"logEntries"`
	Reason     *BuildReason    `json:"reason,omitempty"`
}

// BuildLogs is the answer to GET /templates/{id}/builds/{buildID}/logs.
type BuildLogs struct {
	Logs []BuildLogEntry `json:"logs"`
}

// Template is one entry of GET /templates (and GET /v2/templates).
// CreatedBy and LastSpawnedAt are always null from Warren and SpawnCount 0
// (E2B's API has them; the CLI's `template list` reads them).
type Template struct {
	TemplateID    string     `json:"templateID"`
	BuildID       string     `json:"buildID"`
	CPUCount      int        `json:"cpuCount"`
	MemoryMB      int64      `json:"memoryMB"`
	DiskSizeMB    int64      `json:"diskSizeMB"`
	Public        bool       `json:"public"`
	Aliases       []string   `json:"aliases"`
	Names         []string   `json:"names"`
	CreatedAt     time.Time  `json:"createdAt"`
	UpdatedAt     time.Time  `json:"updatedAt"`
	CreatedBy     *struct{}  `json:"createdBy"`
	LastSpawnedAt *time.Time `json:"lastSpawnedAt"`
	SpawnCount    int64      `json:"spawnCount"`
	BuildCount    int        `json:"buildCount"`
	EnvdVersion   string     `json:"envdVersion"`
	BuildStatus   string     `json:"buildStatus"`
}

// TemplateWithBuilds is the answer to GET /templates/{id}: the template
// and a page of its builds, newest first. LastSpawnedAt is always null
// from Warren and SpawnCount 0.
type TemplateWithBuilds struct {
	TemplateID    string                 `json:"templateID"`
	Public        bool                   `json:"public"`
	Aliases       []string               `json:"aliases"`
	Names         []string               `json:"names"`
	CreatedAt     time.Time              `json:"createdAt"`
	UpdatedAt     time.Time              `json:"updatedAt"`
	LastSpawnedAt *time.Time             `json:"lastSpawnedAt"`
	SpawnCount    int64                  `json:"spawnCount"`
	Builds        []TemplateBuildSummary `json:"builds"`
}

// TemplateBuildSummary is one build of TemplateWithBuilds.
type TemplateBuildSummary struct {
	BuildID     string     `json:"buildID"`
	Status      string     `json:"status"`
	CreatedAt   time.Time  `json:"createdAt"`
	UpdatedAt   time.Time  `json:"updatedAt"`
	FinishedAt  *time.Time `json:"finishedAt,omitempty"`
	CPUCount    int        `json:"cpuCount"`
	MemoryMB    int64      `json:"memoryMB"`
	DiskSizeMB  int64      `json:"diskSizeMB"`
	EnvdVersion string     `json:"envdVersion,omitempty"`
}

// TemplateUpdate is the body of PATCH /templates/{id} (and /v2/...);
// TemplateNames is its answer.
type TemplateUpdate struct {
	Public *bool `json:"public,omitempty"`
}

// TemplateNames is the answer to PATCH /templates/{id}.
type TemplateNames struct {
	Names []string `json:"names"`
}

// TemplateAlias is the answer to GET /templates/aliases/{alias}.
type TemplateAlias struct {
	TemplateID string `json:"templateID"`
	Public     bool   `json:"public"`
}

// TagsRequest is the body of POST /templates/tags (Tags to point at the
// build behind Target, "alias:tag" or "alias" for its default tag) and of DELETE /templates/tags (Name, the
// template, and the Tags to remove).
type TagsRequest struct {
	Target string   `json:"target,omitempty"`
	Name   string   `json:"name,omitempty"`
	Tags   []string `json:"tags"`
}

// TagsAssigned is the answer to POST /templates/tags: the build the tags
// now point at.
type TagsAssigned struct {
	BuildID string   `json:"buildID"`
	Tags    []string `json:"tags"`
}

// TemplateTag is one entry of GET /templates/{id}/tags.
type TemplateTag struct {
	Tag       string    `json:"tag"`
	BuildID   string    `json:"buildID"`
	CreatedAt time.Time `json:"createdAt"`
}

// BuildFailedError is a build that ended in status error.
type BuildFailedError struct {
	TemplateID, BuildID string
	Reason              BuildReason
}

func (e *BuildFailedError) Error() string {
	if e.Reason.Message == "" {
		return fmt.Sprintf("build %s of template %s failed", e.BuildID, e.TemplateID)
	}
	return e.Reason.Message
}

// CreateTemplate makes a template (or a new build of an existing name) with
// a waiting build (POST /v3/templates).
func (c *Client) CreateTemplate(ctx context.Context, req NewTemplate) (*TemplateCreated, error) {
	var out TemplateCreated
	if _, _, err := c.Do(ctx, http.MethodPost, "/v3/templates", req, &out); err != nil {
		return nil, fmt.Errorf("create template %q: %w", req.Name, err)
	}
	return &out, nil
}

// TemplateFiles asks whether the COPY context hash of a template is
// stored, and where to upload it if not.
func (c *Client) TemplateFiles(ctx context.Context, templateID, hash string) (*FilesUpload, error) {
	var out FilesUpload
	if _, _, err := c.Do(ctx, http.MethodGet, "/templates/"+url.PathEscape(templateID)+"/files/"+url.PathEscape(hash), nil, &out); err != nil {
		return nil, fmt.Errorf("files %s of template %s: %w", hash, templateID, err)
	}
	return &out, nil
}

// UploadFiles PUTs a gzip'd tar of size bytes to the URL of up, with its
// headers. The URL carries its own authorisation: the API key is not sent.
func (c *Client) UploadFiles(ctx context.Context, up *FilesUpload, body io.Reader, size int64) error {
	if up == nil || up.URL == "" {
		return errors.New("upload files: the server gave no upload URL")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, up.URL, body)
	if err != nil {
		return fmt.Errorf("upload files: %w", err)
	}
	for k, v := range up.Headers {
		if !strings.EqualFold(k, "Content-Length") {
			req.Header.Set(k, v)
		}
	}
	req.ContentLength = size
	resp, err := c.httpClient().Do(req)
	if err != nil {
		return fmt.Errorf("upload files: %w", err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("upload files: %w", &APIError{Status: resp.StatusCode, Message: strings.TrimSpace(string(msg))})
	}
	return nil
}

// StartTemplateBuild starts the waiting build buildID of a template with
// its steps (POST /v2/templates/{id}/builds/{buildID}).
func (c *Client) StartTemplateBuild(ctx context.Context, templateID, buildID string, req TemplateBuild) error {
	if req.Steps == nil {
		req.Steps = []TemplateStep{}
	}
	if _, _, err := c.Do(ctx, http.MethodPost, "/v2/templates/"+url.PathEscape(templateID)+"/builds/"+url.PathEscape(buildID), req, nil); err != nil {
		return fmt.Errorf("start build %s of template %s: %w", buildID, templateID, err)
	}
	return nil
}

// TemplateBuildStatus returns a build's status with its log entries from
// logsOffset on (the number of entries already received).
func (c *Client) TemplateBuildStatus(ctx context.Context, templateID, buildID string, logsOffset int) (*TemplateBuildInfo, error) {
	var out TemplateBuildInfo
	p := "/templates/" + url.PathEscape(templateID) + "/builds/" + url.PathEscape(buildID) + "/status?logsOffset=" + fmt.Sprint(logsOffset)
	if _, _, err := c.Do(ctx, http.MethodGet, p, nil, &out); err != nil {
		return nil, fmt.Errorf("status of build %s of template %s: %w", buildID, templateID, err)
	}
	return &out, nil
}

// WaitTemplateBuild polls a build's status every interval (200 ms when 0),
// calls onLog (when set) with each new log entry in order, and returns the
// final status once the build is ready and every entry was delivered. A
// failed build returns its status and a *BuildFailedError.
func (c *Client) WaitTemplateBuild(ctx context.Context, templateID, buildID string, interval time.Duration, onLog func(BuildLogEntry)) (*TemplateBuildInfo, error) {
	if interval <= 0 {
		interval = 200 * time.Millisecond
	}
	offset := 0
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
		}
		st, err := c.TemplateBuildStatus(ctx, templateID, buildID, offset)
		if err != nil {
			return nil, err
		}
		for _, e := range st.LogEntries {
			if onLog != nil {
				onLog(e)
			}
		}
		offset += len(st.LogEntries)
		// After the end, poll until no entry is left (as the SDK does).
		if (st.Status == BuildReady || st.Status == BuildError) && len(st.LogEntries) == 0 {
			if st.Status == BuildError {
				fe := &BuildFailedError{TemplateID: templateID, BuildID: buildID}
				if st.Reason != nil {
					fe.Reason = *st.Reason
				}
				return st, fe
			}
			return st, nil
		}
		t.Reset(interval)
	}
}

// Templates lists the team's templates, oldest first (GET /templates).
func (c *Client) Templates(ctx context.Context) ([]Template, error) {
	var out []Template
	if _, _, err := c.Do(ctx, http.MethodGet, "/templates", nil, &out); err != nil {
		return nil, fmt.Errorf("list templates: %w", err)
	}
	return out, nil
}

// TemplateByAlias looks a template up by alias (GET
// /templates/aliases/{alias}); a 404 answer is an error IsNotFound
// recognises.
func (c *Client) TemplateByAlias(ctx context.Context, alias string) (*TemplateAlias, error) {
	var out TemplateAlias
	if _, _, err := c.Do(ctx, http.MethodGet, "/templates/aliases/"+url.PathEscape(alias), nil, &out); err != nil {
		return nil, fmt.Errorf("template alias %q: %w", alias, err)
	}
	return &out, nil
}

// DeleteTemplate deletes a template of the team (ID, alias or alias:tag)
// with its builds. It returns false when there was no such template.
func (c *Client) DeleteTemplate(ctx context.Context, id string) (bool, error) {
	_, _, err := c.Do(ctx, http.MethodDelete, "/templates/"+url.PathEscape(id), nil, nil)
	if IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("delete template %q: %w", id, err)
	}
	return true, nil
}

func (c *Client) httpClient() *http.Client {
	if c.HTTP != nil {
		return c.HTTP
	}
	return http.DefaultClient
}
