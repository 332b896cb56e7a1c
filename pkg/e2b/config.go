package e2b

import (
	"cmp"
	"context"
	"errors"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/warren-sandbox/warren/internal/envdproto"
	"github.com/warren-sandbox/warren/pkg/client"
)

// EnvdPort is envd's port inside every sandbox.
const EnvdPort = envdproto.Port

// DefaultDomain is E2B's cloud domain, used when neither an option nor
// E2B_DOMAIN names one.
const DefaultDomain = "e2b.app"

// DefaultRequestTimeout bounds each unary request (REST, envd RPC, file
// transfer) when Config.RequestTimeout is zero.
const DefaultRequestTimeout = 60 * time.Second

// ErrNoAPIKey is returned when neither Config.APIKey nor E2B_API_KEY is set.
var ErrNoAPIKey = errors.New("e2b: no API key: set Config.APIKey or E2B_API_KEY")

// Config is how to reach the API and the sandboxes. The zero value reads
// everything from the environment.
type Config struct {
	// APIKey is sent as X-API-Key (E2B_API_KEY).
	APIKey string
	// APIURL is the REST base URL (E2B_API_URL; default https://api.<Domain>).
	APIURL string
	// SandboxURL, when set, receives the envd traffic of every sandbox,
	// routed by the E2b-Sandbox-Id header (E2B_SANDBOX_URL). Warren's
	// plain-http mode needs it.
	SandboxURL string
	// Domain is the sandbox domain (E2B_DOMAIN; default e2b.app); a
	// sandbox's own domain from create/connect takes precedence.
	Domain string
	// RequestTimeout bounds each unary request; negative means no bound
	// (default DefaultRequestTimeout).
	RequestTimeout time.Duration
	// Retries is how often a REST request answered 429 with a numeric
	// Retry-After is retried after that wait (DefaultRetries when zero;
	// none when negative).
	Retries int
	// HTTPClient carries every request (http.DefaultClient when nil).
	HTTPClient *http.Client
	// Header is added to every REST request.
	Header http.Header
	// Debug talks to an envd on localhost:49983 (or SandboxURL) with no
	// API at all, as the other SDKs' debug mode (E2B_DEBUG=true): Create
	// and Connect return the sandbox "debug_sandbox_id", Kill and
	// SetTimeout do nothing, Metrics is empty. For testing an envd alone.
	Debug bool
}

// The debug mode's sandbox.
const (
	debugSandboxID   = "debug_sandbox_id"
	debugEnvdVersion = "99.99.99"
)

// resolve fills unset fields from the environment and defaults.
func (c Config) resolve() (Config, error) {
	c.APIKey = cmp.Or(c.APIKey, os.Getenv("E2B_API_KEY"))
	c.Debug = c.Debug || os.Getenv("E2B_DEBUG") == "true"
	c.SandboxURL = strings.TrimRight(cmp.Or(c.SandboxURL, os.Getenv("E2B_SANDBOX_URL")), "/")
	c.Domain = cmp.Or(c.Domain, os.Getenv("E2B_DOMAIN"), DefaultDomain)
	defaultAPI := "https://api." + c.Domain
	if c.Debug {
		defaultAPI = "http://localhost:3000"
	}
	c.APIURL = strings.TrimRight(cmp.Or(c.APIURL, os.Getenv("E2B_API_URL"), defaultAPI), "/")
	if c.RequestTimeout == 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	if c.HTTPClient == nil {
		c.HTTPClient = http.DefaultClient
	}
	if c.Retries == 0 {
		c.Retries = DefaultRetries
	}
	if c.APIKey == "" && !c.Debug {
		return c, ErrNoAPIKey
	}
	return c, nil
}

// api returns the REST client of the configuration.
func (c Config) api() *client.Client {
	rc := client.New(c.APIURL, c.APIKey)
	rc.HTTP = c.HTTPClient
	if c.Retries > 0 {
		next := c.HTTPClient.Transport
		if next == nil {
			next = http.DefaultTransport
		}
		hc := *c.HTTPClient
		hc.Transport = retrying{next: next, retries: c.Retries}
		rc.HTTP = &hc
	}
	for k, v := range c.Header {
		rc.Header[k] = v
	}
	return rc
}

// withTimeout bounds ctx by the request timeout.
func (c Config) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if c.RequestTimeout < 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, c.RequestTimeout)
}

// sharedHostDomains are E2B's domains whose envd traffic goes to one
// host, routed by headers, rather than to a host per sandbox.
var sharedHostDomains = []string{"e2b.app", "e2b.dev", "e2b.pro", "e2b-staging.dev"}

// envdURL is the base URL of a sandbox's envd, as the other SDKs build it.
func (c Config) envdURL(id, domain string) string {
	if c.SandboxURL != "" {
		return c.SandboxURL
	}
	if c.Debug {
		return "http://localhost:" + strconv.Itoa(EnvdPort)
	}
	domain = cmp.Or(domain, c.Domain)
	for _, d := range sharedHostDomains {
		if d == domain {
			return "https://sandbox." + domain
		}
	}
	return "https://" + hostFor(EnvdPort, id, domain)
}

// directEnvdURL is the base of signed file URLs: no routing headers can
// be attached to those, so it names the sandbox in the host.
func (c Config) directEnvdURL(id, domain string) string {
	if c.SandboxURL != "" {
		return c.SandboxURL
	}
	if c.Debug {
		return "http://localhost:" + strconv.Itoa(EnvdPort)
	}
	return "https://" + hostFor(EnvdPort, id, cmp.Or(domain, c.Domain))
}
