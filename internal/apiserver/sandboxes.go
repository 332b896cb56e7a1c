package apiserver

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/errdefs/errhttp"
	"github.com/warren-sandbox/warren/internal/lifecycle"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/sandbox"
	"github.com/warren-sandbox/warren/internal/store"
	"github.com/warren-sandbox/warren/pkg/client"
)

// Default TTLs, E2B's: 15 s for the v1 create and resume, 300 s for the
// v2 create and connect; a refresh of 60 s by default, an hour at most
// (docs/api.md, "Sandboxes").
const (
	defaultTimeoutV1      = 15 * time.Second
	defaultTimeoutV2      = 300 * time.Second
	defaultConnectTimeout = 300 * time.Second
	defaultRefresh        = 60 * time.Second
	maxRefresh            = time.Hour
)

func (s *Server) createV1(w http.ResponseWriter, r *http.Request, c *caller) error {
	return s.create(w, r, c, false)
}

func (s *Server) createV2(w http.ResponseWriter, r *http.Request, c *caller) error {
	return s.create(w, r, c, true)
}

func (s *Server) create(w http.ResponseWriter, r *http.Request, c *caller, v2 bool) error {
	if c.teamID == "" {
		return errdefs.Publicf(errdefs.ErrInvalid, "an admin creating a sandbox must name the team in X-Team-ID")
	}
	var req client.NewSandbox
	if err := decode(r, &req, true); err != nil {
		return err
	}
	p, err := s.createParams(r, c, &req, v2)
	if err != nil {
		return err
	}
	sb, err := s.lc.Create(r.Context(), *p)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, s.sandboxJSON(sb))
	return nil
}

// timeoutOf validates a TTL in seconds against the team's maximum.
func (s *Server) timeoutOf(c *caller, field string, secs *int, def time.Duration) (time.Duration, error) {
	if secs == nil {
		return def, nil
	}
	if *secs < 0 {
		return 0, invalid(field, "must not be negative, got %d", *secs)
	}
	d := time.Duration(*secs) * time.Second
	if max := s.limits(c).MaxTimeout; d > max {
		if max%time.Hour == 0 {
			return 0, errdefs.Publicf(errdefs.ErrInvalid, "Timeout cannot be greater than %d hours", max/time.Hour)
		}
		return 0, errdefs.Publicf(errdefs.ErrInvalid, "Timeout cannot be greater than %d seconds", int(max.Seconds()))
	}
	return d, nil
}

func (s *Server) createParams(r *http.Request, c *caller, req *client.NewSandbox, v2 bool) (*lifecycle.CreateParams, error) {
	if strings.TrimSpace(req.TemplateID) == "" {
		return nil, invalid("templateID", "required")
	}
	if err := checkRef("templateID", req.TemplateID); err != nil {
		return nil, err
	}
	def := defaultTimeoutV1
	if v2 {
		def = defaultTimeoutV2
	}
	if req.Timeout != nil && *req.Timeout == 0 {
		req.Timeout = nil
	}
	timeout, err := s.timeoutOf(c, "timeout", req.Timeout, def)
	if err != nil {
		return nil, err
	}
	lim := s.limits(c)
	tmpl, err := s.cfg.Templates.Resolve(r.Context(), c.teamID, req.TemplateID)
	if err != nil {
		if errdefs.IsNotFound(err) {
			return nil, errdefs.Publicf(errdefs.ErrNotFound, "template '%s' not found", req.TemplateID)
		}
		return nil, err
	}
	res := s.sandboxResources(tmpl)
	if res.VCPUs > lim.MaxVCPUs {
		return nil, errdefs.Publicf(errdefs.ErrInvalid, "cpuCount %d exceeds the team's limit of %d", res.VCPUs, lim.MaxVCPUs)
	}
	if res.MemoryMB > lim.MaxMemoryMB {
		return nil, errdefs.Publicf(errdefs.ErrInvalid, "memoryMB %d exceeds the team's limit of %d", res.MemoryMB, lim.MaxMemoryMB)
	}
	if lim.MaxDiskMB > 0 && res.DiskMB > lim.MaxDiskMB {
		return nil, errdefs.Publicf(errdefs.ErrInvalid, "disk of %d MiB exceeds the team's limit of %d MiB", res.DiskMB, lim.MaxDiskMB)
	}
	autoPause := req.AutoPause != nil && *req.AutoPause
	autoPauseMemory := req.AutoPauseMemory == nil || *req.AutoPauseMemory
	autoResume := req.AutoResume != nil && req.AutoResume.Enabled
	if autoResume && !autoPauseMemory {
		return nil, invalid("autoResume", "cannot be combined with autoPauseMemory=false")
	}
	allow := req.AllowInternetAccess
	internet := allow == nil || *allow
	var policy sandbox.NetworkPolicy
	var netDoc json.RawMessage
	traffic := false
	if req.Network != nil {
		n := *req.Network
		var ed egressDoc
		if policy, ed, err = s.egressPolicy(r.Context(), c.teamID, "network", egressSpec{n.AllowOut, n.DenyOut, n.Rules, n.EgressProxy}); err != nil {
			return nil, err
		}
		if err := checkRouting(req.Network); err != nil {
			return nil, err
		}
		traffic = n.AllowPublicTraffic != nil && !*n.AllowPublicTraffic
		// Kept for display: rules as sent (placeholders, not values), the
		// proxy without its password.
		n.Rules, n.EgressProxy = ed.Rules, ed.EgressProxy
		netDoc, _ = json.Marshal(n)
	}
	policy.Internet = internet
	for k := range req.Metadata {
		if k == "" {
			return nil, invalid("metadata", "keys must not be empty")
		}
	}
	alias := ""
	if req.TemplateID != tmpl.ID {
		alias = req.TemplateID
	}
	// mcp is the SDK's: it creates from mcp-gateway and then starts the
	// gateway in the sandbox with this config itself (docs/mcp.md). The
	// server only checks its shape; the config (which holds the servers'
	// secrets) is neither kept nor logged.
	if given(req.Mcp) && !jsonObject(req.Mcp) {
		return nil, invalid("mcp", "must be an object of MCP servers")
	}
	if given(req.IAM) {
		return nil, errdefs.Publicf(errdefs.ErrInvalid, "iam is not supported by this server (no workload identity tokens)")
	}
	mounts, err := s.volumeMounts(r, c, req.VolumeMounts)
	if err != nil {
		return nil, err
	}
	if err := s.checkSnapshotVolumes(r.Context(), tmpl, mounts); err != nil {
		return nil, err
	}
	var volumes json.RawMessage
	var nodeVolumes []nodeapi.VolumeMount
	if len(mounts) > 0 {
		if nodeVolumes, volumes, err = s.cfg.Volumes.Resolve(r.Context(), c.teamID, mounts); err != nil {
			return nil, err
		}
	}
	secure := v2 || req.Secure == nil || *req.Secure
	return &lifecycle.CreateParams{
		TeamID: c.teamID, Template: tmpl, Alias: alias, Timeout: timeout, Resources: res,
		Metadata: req.Metadata, EnvVars: req.EnvVars, Secure: secure, TrafficToken: traffic,
		AutoPause: autoPause, AutoPauseMemory: autoPauseMemory, AutoResume: autoResume,
		AllowInternet: allow, Policy: policy, Network: netDoc, VolumeMounts: volumes, Volumes: nodeVolumes,
		MaxConcurrent: lim.MaxConcurrent,
	}, nil
}

// sandboxResources sizes a sandbox of tmpl as E2B does: the CPU and
// memory its template was built with, and a disk no smaller than the
// server's default; the server's defaults fill what the template leaves
// zero.
// SandboxResources are the resources a create of tmpl with default
// resources gets: a warm pool of tmpl made with them serves such creates.
func (s *Server) SandboxResources(tmpl nodeapi.Template) sandbox.Resources {
	return s.sandboxResources(tmpl)
}

func (s *Server) sandboxResources(tmpl nodeapi.Template) sandbox.Resources {
	res := s.cfg.DefaultResources
	t := tmpl.Resources
	if t.VCPUs > 0 {
		res.VCPUs = t.VCPUs
	}
	if t.MemoryMB > 0 {
		res.MemoryMB = t.MemoryMB
	}
	res.DiskMB = max(res.DiskMB, t.DiskMB)
	return res
}

func (s *Server) sandboxJSON(sb *store.Sandbox) client.Sandbox {
	out := client.Sandbox{
		TemplateID: sb.TemplateID, SandboxID: sb.ID, Alias: sb.Spec.Alias, ClientID: "warren",
		EnvdVersion: sb.Spec.EnvdVersion, EnvdAccessToken: sb.Spec.EnvdAccessToken,
	}
	if sb.Spec.TrafficAccessToken != "" {
		out.TrafficAccessToken = &sb.Spec.TrafficAccessToken
	}
	if s.cfg.Domain != "" {
		d := s.cfg.Domain
		out.Domain = &d
	}
	return out
}

// apiState maps lifecycle states onto the API's running|paused.
func apiState(st sandbox.State) string {
	switch st {
	case sandbox.StatePaused, sandbox.StatePausing:
		return "paused"
	default:
		return "running"
	}
}

func listedJSON(sb *store.Sandbox) client.ListedSandbox {
	var vols []client.VolumeMount
	if len(sb.Spec.VolumeMounts) > 0 {
		json.Unmarshal(sb.Spec.VolumeMounts, &vols)
	}
	md := sb.Spec.Metadata
	if md == nil {
		md = map[string]string{}
	}
	return client.ListedSandbox{
		TemplateID: sb.TemplateID, Alias: sb.Spec.Alias, SandboxID: sb.ID, ClientID: "warren",
		StartedAt: sb.StartedAt, EndAt: sb.EndAt, CPUCount: sb.Spec.Resources.VCPUs,
		MemoryMB: sb.Spec.Resources.MemoryMB, DiskSizeMB: sb.Spec.Resources.DiskMB, Metadata: md,
		State: apiState(sb.State), EnvdVersion: sb.Spec.EnvdVersion, VolumeMounts: vols,
	}
}

func (s *Server) getSandbox(w http.ResponseWriter, r *http.Request, c *caller) error {
	id := r.PathValue("id")
	sb, err := s.lc.Get(r.Context(), c.teamID, id)
	if err != nil {
		return sandboxErr(id, err)
	}
	d := client.SandboxDetail{ListedSandbox: listedJSON(sb), EnvdAccessToken: sb.Spec.EnvdAccessToken, AllowInternetAccess: sb.Spec.AllowInternet}
	if s.cfg.Domain != "" {
		dom := s.cfg.Domain
		d.Domain = &dom
	}
	if len(sb.Spec.Network) > 0 {
		var n client.NetworkConfig
		if json.Unmarshal(sb.Spec.Network, &n) == nil {
			d.Network = &n
		}
	}
	onTimeout := "kill"
	if sb.Spec.AutoPause {
		onTimeout = "pause"
	}
	d.Lifecycle = &client.Lifecycle{AutoResume: sb.Spec.AutoResume, OnTimeout: onTimeout}
	if sb.State == sandbox.StateRunning {
		d.Health = string(s.lc.Health(r.Context(), sb))
	}
	writeJSON(w, http.StatusOK, d)
	return nil
}

func (s *Server) kill(w http.ResponseWriter, r *http.Request, c *caller) error {
	id := r.PathValue("id")
	reason := sandbox.KillRequest
	if c.admin {
		reason = sandbox.KillAdmin
	}
	if err := s.lc.Kill(r.Context(), c.teamID, id, reason); err != nil {
		return sandboxErr(id, err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) setTimeout(w http.ResponseWriter, r *http.Request, c *caller) error {
	id := r.PathValue("id")
	var req struct {
		Timeout *int `json:"timeout"`
	}
	if err := decode(r, &req, true); err != nil {
		return err
	}
	if req.Timeout == nil {
		return invalid("timeout", "required")
	}
	d, err := s.timeoutOf(c, "timeout", req.Timeout, 0)
	if err != nil {
		return err
	}
	if err := s.lc.SetTimeout(r.Context(), c.teamID, id, d); err != nil {
		return sandboxErr(id, err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) refresh(w http.ResponseWriter, r *http.Request, c *caller) error {
	id := r.PathValue("id")
	var req client.RefreshRequest
	if err := decode(r, &req, false); err != nil {
		return err
	}
	d := defaultRefresh
	if req.Duration != nil {
		if *req.Duration < 0 || time.Duration(*req.Duration)*time.Second > maxRefresh {
			return invalid("duration", "must be between 0 and %d seconds, got %d", int(maxRefresh.Seconds()), *req.Duration)
		}
		d = time.Duration(*req.Duration) * time.Second
	}
	if err := s.lc.Extend(r.Context(), c.teamID, id, d); err != nil {
		return sandboxErr(id, err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) pause(w http.ResponseWriter, r *http.Request, c *caller) error {
	id := r.PathValue("id")
	var req client.PauseRequest
	if err := decode(r, &req, false); err != nil {
		return err
	}
	memory := req.Memory == nil || *req.Memory
	if err := s.lc.Pause(r.Context(), c.teamID, id, memory); err != nil {
		var le *lifecycle.LimitError
		switch {
		case errdefs.IsConflict(err):
			err = errdefs.WithMessage(err, fmt.Sprintf("sandbox %q is already paused", id))
		case errdefs.IsExhausted(err) && !errors.As(err, &le):
			// A node's refusal joins the runtime's error to the class.
			err = errdefs.WithMessage(err, fmt.Sprintf("sandbox %q cannot be paused now (its node is busy or short of disk); try again later", id))
		}
		return sandboxErr(id, err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) resume(w http.ResponseWriter, r *http.Request, c *caller) error {
	id := r.PathValue("id")
	var req client.ResumeRequest
	if err := decode(r, &req, false); err != nil {
		return err
	}
	if req.Memory != nil && !*req.Memory {
		return invalid("memory", "false (resume from disk only) is not supported by this server")
	}
	d, err := s.timeoutOf(c, "timeout", req.Timeout, defaultTimeoutV1)
	if err != nil {
		return err
	}
	sb, err := s.lc.Resume(r.Context(), c.teamID, id, d, req.AutoPause)
	if err != nil {
		if errdefs.IsConflict(err) {
			return errdefs.WithMessage(err, fmt.Sprintf("sandbox %q is already running", id))
		}
		return sandboxErr(id, err)
	}
	writeJSON(w, http.StatusCreated, s.sandboxJSON(sb))
	return nil
}

func (s *Server) connectV1(w http.ResponseWriter, r *http.Request, c *caller) error {
	return s.connect(w, r, c, true)
}
func (s *Server) connectV2(w http.ResponseWriter, r *http.Request, c *caller) error {
	return s.connect(w, r, c, false)
}

func (s *Server) connect(w http.ResponseWriter, r *http.Request, c *caller, timeoutRequired bool) error {
	id := r.PathValue("id")
	var req client.ConnectRequest
	if err := decode(r, &req, timeoutRequired); err != nil {
		return err
	}
	if timeoutRequired && req.Timeout == nil {
		return invalid("timeout", "required")
	}
	if req.Memory != nil && !*req.Memory {
		return invalid("memory", "false (resume from disk only) is not supported by this server")
	}
	d, err := s.timeoutOf(c, "timeout", req.Timeout, defaultConnectTimeout)
	if err != nil {
		return err
	}
	sb, resumed, err := s.lc.Connect(r.Context(), c.teamID, id, d)
	if err != nil {
		return sandboxErr(id, err)
	}
	status := http.StatusOK
	if resumed {
		status = http.StatusCreated
	}
	writeJSON(w, status, s.sandboxJSON(sb))
	return nil
}

func (s *Server) updateNetwork(w http.ResponseWriter, r *http.Request, c *caller) error {
	id := r.PathValue("id")
	// Python sends allow_internet_access, the JS SDK's types
	// allowInternetAccess: either is taken; neither keeps the current
	// setting.
	var req struct {
		client.NetworkUpdate
		AllowInternetAccessCamel *bool `json:"allowInternetAccess"`
	}
	if err := decode(r, &req, true); err != nil {
		return err
	}
	if req.AllowInternetAccess == nil {
		req.AllowInternetAccess = req.AllowInternetAccessCamel
	}
	p, ed, err := s.egressPolicy(r.Context(), c.teamID, "", egressSpec{req.AllowOut, req.DenyOut, req.Rules, req.EgressProxy})
	if err != nil {
		return err
	}
	sb, err := s.lc.Get(r.Context(), c.teamID, id)
	if err != nil {
		return sandboxErr(id, err)
	}
	var doc client.NetworkConfig
	if len(sb.Spec.Network) > 0 {
		json.Unmarshal(sb.Spec.Network, &doc)
	}
	// The update replaces the whole egress configuration (E2B's): what it
	// leaves out is cleared.
	doc.AllowOut, doc.DenyOut, doc.Rules, doc.EgressProxy = req.AllowOut, req.DenyOut, ed.Rules, ed.EgressProxy
	raw, _ := json.Marshal(doc)
	if err := s.lc.UpdateNetwork(r.Context(), c.teamID, id, p, raw, req.AllowInternetAccess); err != nil {
		if errdefs.IsConflict(err) {
			return errdefs.WithMessage(err, fmt.Sprintf("sandbox %q is not running", id))
		}
		return sandboxErr(id, err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) fork(w http.ResponseWriter, r *http.Request, c *caller) error {
	id := r.PathValue("id")
	var req client.ForkRequest
	if err := decode(r, &req, false); err != nil {
		return err
	}
	count := 1
	if req.Count != nil {
		if *req.Count < 1 || *req.Count > 100 {
			return invalid("count", "must be between 1 and 100, got %d", *req.Count)
		}
		count = *req.Count
	}
	d, err := s.timeoutOf(c, "timeout", req.Timeout, defaultTimeoutV1)
	if err != nil {
		return err
	}
	results, err := s.lc.Fork(r.Context(), c.teamID, id, count, d, s.limits(c).MaxConcurrent)
	if err != nil {
		if errdefs.IsConflict(err) {
			return errdefs.WithMessage(err, fmt.Sprintf("sandbox %q is not running", id))
		}
		if errdefs.IsUnsupported(err) {
			// 501, not 503: the SDK retries 503 as "busy".
			return errdefs.WithMessage(err, "fork is not supported by this node's runtime driver")
		}
		return sandboxErr(id, err)
	}
	out := make([]client.ForkResult, len(results))
	for i, res := range results {
		if res.Err != nil {
			he := errhttp.From(res.Err)
			if _, public := errdefs.Message(res.Err); !public || he.Code >= 500 {
				s.log.Warn("fork", "sandbox_id", id, "status", he.Code, "error", res.Err)
			}
			out[i].Error = &client.Error{Code: he.Code, Message: he.Msg}
			continue
		}
		sb := s.sandboxJSON(res.Sandbox)
		out[i].Sandbox = &sb
	}
	writeJSON(w, http.StatusCreated, out)
	return nil
}
