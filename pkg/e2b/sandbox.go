package e2b

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/warren-sandbox/warren/pkg/client"
)

// SandboxInfo is what the API tells about a sandbox (GET /sandboxes/{id}).
type SandboxInfo = client.SandboxDetail

// ListedSandbox is one entry of List.
type ListedSandbox = client.ListedSandbox

// Network is a sandbox's network configuration (allow/deny lists, egress
// proxy, public traffic).
type Network = client.NetworkConfig

// Lifecycle says what happens when a sandbox's timeout passes.
type Lifecycle struct {
	// OnTimeout is "kill" (the default) or "pause".
	OnTimeout string
	// AutoResume wakes a paused sandbox on traffic (with OnTimeout "pause").
	AutoResume bool
}

// CreateOptions describe a new sandbox.
type CreateOptions struct {
	Config
	// Template is the template ID or alias ("base" when empty).
	Template string
	// Timeout is the sandbox's lifetime from now (the server's default,
	// 5 minutes upstream, when zero). Whole seconds are sent.
	Timeout time.Duration
	// Env is the environment of every process started in the sandbox.
	Env map[string]string
	// Metadata is kept with the sandbox and filters List.
	Metadata map[string]string
	// Secure makes envd require the access token (the server's default when nil).
	Secure *bool
	// AllowInternetAccess turns outbound traffic on or off (default on).
	AllowInternetAccess *bool
	// Network refines outbound and inbound traffic rules.
	Network *Network
	// Lifecycle is the timeout policy (kill when nil).
	Lifecycle *Lifecycle
}

// DefaultConnectTimeout is how long Connect and Resume keep a sandbox
// running when no timeout is given, as in the JS SDK.
const DefaultConnectTimeout = 5 * time.Minute

// ConnectOptions describe a connection to an existing sandbox.
type ConnectOptions struct {
	Config
	// Timeout is how long the sandbox runs at least from now, resuming it
	// if paused (DefaultConnectTimeout when zero).
	Timeout time.Duration
}

// Sandbox is a handle to one running sandbox.
type Sandbox struct {
	// ID is the sandbox ID.
	ID string
	// TemplateID is the template it was created from.
	TemplateID string
	// Domain is the sandbox domain (Config.Domain unless the API named one).
	Domain string
	// EnvdVersion is the version of the sandbox's envd.
	EnvdVersion string
	// Commands runs processes in the sandbox.
	Commands *Commands
	// Files reads and writes the sandbox's filesystem.
	Files *Files
	// Pty runs interactive terminals.
	Pty *Pty

	cfg  Config
	api  *client.Client
	envd *envd
}

// Create starts a sandbox.
func Create(ctx context.Context, o CreateOptions) (*Sandbox, error) {
	cfg, err := o.Config.resolve()
	if err != nil {
		return nil, err
	}
	req := client.NewSandbox{
		TemplateID:          cmp.Or(o.Template, "base"),
		Metadata:            o.Metadata,
		EnvVars:             o.Env,
		Secure:              o.Secure,
		AllowInternetAccess: o.AllowInternetAccess,
		Network:             o.Network,
	}
	if o.Timeout > 0 {
		req.Timeout = seconds(o.Timeout)
	}
	if l := o.Lifecycle; l != nil {
		switch l.OnTimeout {
		case "", "kill":
		case "pause":
			pause := true
			req.AutoPause = &pause
			req.AutoResume = &client.AutoResume{Enabled: l.AutoResume}
		default:
			return nil, fmt.Errorf("e2b: lifecycle onTimeout %q: want kill or pause", l.OnTimeout)
		}
	}
	if cfg.Debug {
		return newSandbox(cfg, debugSandbox()), nil
	}
	ctx, cancel := cfg.withTimeout(ctx)
	defer cancel()
	sb, err := cfg.api().Create(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("create sandbox from template %s: %w", req.TemplateID, err)
	}
	s := newSandbox(cfg, sb)
	if err := s.envd.require(envdSDK, "this SDK"); err != nil {
		// As the other SDKs: a sandbox it cannot talk to is not left running.
		if _, kerr := kill(context.WithoutCancel(ctx), cfg, s.ID); kerr != nil {
			err = errors.Join(err, kerr)
		}
		return nil, fmt.Errorf("create sandbox from template %s: %w", req.TemplateID, err)
	}
	return s, nil
}

// Connect returns a handle to the sandbox id, resuming it if paused.
func Connect(ctx context.Context, id string, o ConnectOptions) (*Sandbox, error) {
	cfg, err := o.Config.resolve()
	if err != nil {
		return nil, err
	}
	sb, err := connectSandbox(ctx, cfg, id, o.Timeout)
	if err != nil {
		return nil, err
	}
	return newSandbox(cfg, sb), nil
}

func connectSandbox(ctx context.Context, cfg Config, id string, timeout time.Duration) (*client.Sandbox, error) {
	if cfg.Debug {
		return debugSandbox(), nil
	}
	ctx, cancel := cfg.withTimeout(ctx)
	defer cancel()
	if timeout <= 0 {
		timeout = DefaultConnectTimeout
	}
	sb, _, err := cfg.api().Connect(ctx, id, *seconds(timeout))
	if err != nil {
		return nil, fmt.Errorf("connect to sandbox %s: %w", id, err)
	}
	return sb, nil
}

func debugSandbox() *client.Sandbox {
	return &client.Sandbox{SandboxID: debugSandboxID, EnvdVersion: debugEnvdVersion}
}

func newSandbox(cfg Config, sb *client.Sandbox) *Sandbox {
	s := &Sandbox{ID: sb.SandboxID, TemplateID: sb.TemplateID, EnvdVersion: sb.EnvdVersion, cfg: cfg, api: cfg.api()}
	if sb.Domain != nil {
		s.Domain = *sb.Domain
	}
	s.Domain = cmp.Or(s.Domain, cfg.Domain)
	s.envd = newEnvd(cfg, sb.SandboxID, s.Domain, sb.EnvdVersion, sb.EnvdAccessToken)
	s.Commands = &Commands{e: s.envd}
	s.Files = &Files{e: s.envd}
	s.Pty = &Pty{e: s.envd}
	return s
}

// ListOptions filter and page List.
type ListOptions struct {
	Config
	// Metadata keeps sandboxes whose metadata has all these pairs.
	Metadata map[string]string
	// State keeps sandboxes in these states ("running", "paused"; both when empty).
	State []string
	// StartedAfter keeps sandboxes started at or after this time (none when zero).
	StartedAfter time.Time
	// Template keeps sandboxes of this template (ID or alias).
	Template string
	// Order is "asc" (oldest first) or "desc" (newest first, the
	// server's default), across all pages.
	Order string
	// Limit is the page size (the server's default when zero).
	Limit int
	// NextToken is the token of the page to fetch (the first when empty).
	NextToken string
}

// List returns one page of sandboxes and the token of the next page (""
// after the last).
func List(ctx context.Context, o ListOptions) ([]ListedSandbox, string, error) {
	cfg, err := o.Config.resolve()
	if err != nil {
		return nil, "", err
	}
	ctx, cancel := cfg.withTimeout(ctx)
	defer cancel()
	list, next, err := cfg.api().List(ctx, client.ListOptions{Metadata: o.Metadata, State: o.State,
		StartedAfter: o.StartedAfter, Template: o.Template, Order: o.Order, Limit: o.Limit, NextToken: o.NextToken})
	if err != nil {
		return nil, "", fmt.Errorf("list sandboxes: %w", err)
	}
	return list, next, nil
}

// Kill stops the sandbox id; false when there was no such sandbox.
func Kill(ctx context.Context, id string, cfg Config) (bool, error) {
	cfg, err := cfg.resolve()
	if err != nil {
		return false, err
	}
	return kill(ctx, cfg, id)
}

func kill(ctx context.Context, cfg Config, id string) (bool, error) {
	if cfg.Debug {
		return true, nil
	}
	ctx, cancel := cfg.withTimeout(ctx)
	defer cancel()
	ok, err := cfg.api().Kill(ctx, id)
	if err != nil {
		return false, fmt.Errorf("kill sandbox %s: %w", id, err)
	}
	return ok, nil
}

// Kill stops the sandbox; false when it was already gone.
func (s *Sandbox) Kill(ctx context.Context) (bool, error) { return kill(ctx, s.cfg, s.ID) }

// Info returns what the API knows about the sandbox.
func (s *Sandbox) Info(ctx context.Context) (*SandboxInfo, error) {
	ctx, cancel := s.cfg.withTimeout(ctx)
	defer cancel()
	d, err := s.api.Get(ctx, s.ID)
	if err != nil {
		return nil, fmt.Errorf("sandbox %s info: %w", s.ID, err)
	}
	return d, nil
}

// SetTimeout makes the sandbox end d from now (whole seconds).
func (s *Sandbox) SetTimeout(ctx context.Context, d time.Duration) error {
	if s.cfg.Debug {
		return nil
	}
	ctx, cancel := s.cfg.withTimeout(ctx)
	defer cancel()
	if err := s.api.SetTimeout(ctx, s.ID, *seconds(d)); err != nil {
		return fmt.Errorf("set timeout of sandbox %s: %w", s.ID, err)
	}
	return nil
}

// Pause pauses the sandbox, keeping its memory and files; false when it
// was already paused.
func (s *Sandbox) Pause(ctx context.Context) (bool, error) {
	ctx, cancel := s.cfg.withTimeout(ctx)
	defer cancel()
	ok, err := s.api.Pause(ctx, s.ID)
	if err != nil {
		return false, fmt.Errorf("pause sandbox %s: %w", s.ID, err)
	}
	return ok, nil
}

// Resume resumes a paused sandbox (a no-op on a running one) and keeps it
// running for at least timeout (DefaultConnectTimeout when zero).
func (s *Sandbox) Resume(ctx context.Context, timeout time.Duration) error {
	sb, err := connectSandbox(ctx, s.cfg, s.ID, timeout)
	if err != nil {
		return err
	}
	if sb.EnvdAccessToken != "" {
		s.envd.token.Store(&sb.EnvdAccessToken)
	}
	return nil
}

// IsRunning asks the sandbox's envd for its health: false when the proxy
// answers that the sandbox is not there (502), as the other SDKs do.
func (s *Sandbox) IsRunning(ctx context.Context) (bool, error) {
	ctx, cancel := s.cfg.withTimeout(ctx)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.envd.base+"/health", nil)
	if err != nil {
		return false, err
	}
	resp, err := s.envd.hc.Do(req)
	if err != nil {
		return false, fmt.Errorf("health of sandbox %s: %w", s.ID, err)
	}
	resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusBadGateway:
		return false, nil
	case resp.StatusCode < 300:
		return true, nil
	}
	return false, fmt.Errorf("health of sandbox %s: status %d", s.ID, resp.StatusCode)
}

// Host is the host name that reaches port in the sandbox
// (<port>-<id>.<domain>; no scheme).
// In debug mode it is localhost:<port>.
func (s *Sandbox) Host(port int) string {
	if s.cfg.Debug {
		return "localhost:" + strconv.Itoa(port)
	}
	return hostFor(port, s.ID, s.Domain)
}

func hostFor(port int, id, domain string) string {
	return strconv.Itoa(port) + "-" + id + "." + domain
}

// seconds rounds d up to whole seconds (at least one).
func seconds(d time.Duration) *int {
	s := int((d + time.Second - 1) / time.Second)
	s = max(s, 1)
	return &s
}

// IsNotFound reports whether err says a sandbox, file or process does not
// exist.
func IsNotFound(err error) bool {
	return errors.Is(err, ErrNotFound) || client.IsNotFound(err)
}
