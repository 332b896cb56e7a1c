package e2b

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"

	"connectrpc.com/connect"

	"github.com/warren-sandbox/warren/api/envd/filesystem/filesystemconnect"
	"github.com/warren-sandbox/warren/api/envd/process/processconnect"
)

// ErrNotFound is wrapped by the errors about a missing file, directory or
// process.
var ErrNotFound = errors.New("not found")

// EnvdError is a non-2xx answer of envd's HTTP routes (/files, /health) or
// of the proxy in front of it.
type EnvdError struct {
	Status  int
	Message string
}

func (e *EnvdError) Error() string { return fmt.Sprintf("envd: %d: %s", e.Status, e.Message) }

// Is makes a 404 match ErrNotFound.
func (e *EnvdError) Is(target error) bool {
	return target == ErrNotFound && e.Status == http.StatusNotFound
}

// envd reaches one sandbox's envd: Connect clients of its process and
// filesystem services and an HTTP client for /files, all with the routing
// headers of the sandbox.
type envd struct {
	cfg          Config
	id           string
	version      string // envd's, as the API reported it
	base, direct string
	token        atomic.Pointer[string] // replaced by Resume
	hc           *http.Client
	proc         processconnect.ProcessClient
	fs           filesystemconnect.FilesystemClient
}

func newEnvd(cfg Config, id, domain, version, token string) *envd {
	e := &envd{cfg: cfg, id: id, version: version, base: cfg.envdURL(id, domain), direct: cfg.directEnvdURL(id, domain)}
	e.token.Store(&token)
	next := cfg.HTTPClient.Transport
	if next == nil {
		next = http.DefaultTransport
	}
	e.hc = &http.Client{Transport: routing{id: id, next: next}, Jar: cfg.HTTPClient.Jar}
	// JSON like the JS and Python SDKs: every envd and proxy speaks it.
	e.proc = processconnect.NewProcessClient(e.hc, e.base, connect.WithProtoJSON())
	e.fs = filesystemconnect.NewFilesystemClient(e.hc, e.base, connect.WithProtoJSON())
	return e
}

// routing adds the headers that route a request to the sandbox's envd.
type routing struct {
	id   string
	next http.RoundTripper
}

func (r routing) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set("E2b-Sandbox-Id", r.id)
	req.Header.Set("E2b-Sandbox-Port", strconv.Itoa(EnvdPort))
	return r.next.RoundTrip(req)
}

// rpc wraps msg with the access token and the user to act as (Basic
// auth with an empty password, as the SDKs send it; none when user is
// empty and envd has a default user).
func rpc[T any](e *envd, msg *T, user string) *connect.Request[T] {
	r := connect.NewRequest(msg)
	e.auth(r.Header(), e.user(user))
	return r
}

func (e *envd) auth(h http.Header, user string) {
	if tok := e.accessToken(); tok != "" {
		h.Set("X-Access-Token", tok)
	}
	if user != "" {
		h.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(user+":")))
	}
}

// accessToken is the sandbox's envd access token ("" when it has none).
func (e *envd) accessToken() string { return *e.token.Load() }

// stream marks r as a server stream: envd sends keepalives this often
// (seconds) so proxies keep idle streams open.
func stream[T any](r *connect.Request[T]) *connect.Request[T] {
	r.Header().Set("Keepalive-Ping-Interval", "50")
	return r
}

// rpcErr names what a failed RPC was about; a not_found code also wraps
// ErrNotFound.
func rpcErr(err error, format string, args ...any) error {
	what := fmt.Sprintf(format, args...)
	if connect.CodeOf(err) == connect.CodeNotFound {
		return fmt.Errorf("%s: %w (%w)", what, ErrNotFound, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// httpErr turns a non-2xx answer of an envd HTTP route into an *EnvdError,
// taking the message from its JSON body ({"code":..,"message":".."}).
func httpErr(resp *http.Response) error {
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	msg := strings.TrimSpace(string(data))
	var body struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(data, &body) == nil && body.Message != "" {
		msg = body.Message
	}
	return &EnvdError{Status: resp.StatusCode, Message: msg}
}

// unary bounds ctx by the request timeout.
func (e *envd) unary(ctx context.Context) (context.Context, context.CancelFunc) {
	return e.cfg.withTimeout(ctx)
}
