package mcpgateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// MaxServers bounds the servers of one config.
const MaxServers = 32

// MaxConfigBytes bounds the config's JSON.
const MaxConfigBytes = 1 << 20

// Server is one server of a config, resolved: what to install and how to
// start it.
type Server struct {
	// Name is the config's key: a catalog name or github/<owner>/<repo>.
	Name string
	// Alias prefixes the names of this server's tools and prompts that
	// another server of the config offers too ("<alias>__<name>").
	Alias string
	// Entry is a catalog server's entry; GitHub a repository server's
	// source. Exactly one is set.
	Entry  *Entry
	GitHub *GitHub
	// Args follow a catalog server's command; Env (KEY=VALUE) is added to
	// the server's environment; Headers are sent to a remote server.
	Args    []string
	Env     []string
	Headers map[string]string
	// Secrets are the config's values that must never reach a log: every
	// line the gateway logs or reports has them replaced.
	Secrets []string
}

// GitHub is a stdio server run from a GitHub repository's root, as the
// SDK's `github/<owner>/<repo>` servers are: cloned at start, installCmd
// (when set) then runCmd run by bash there.
type GitHub struct {
	Owner, Repo        string
	RunCmd, InstallCmd string
}

// ServerError is a config's or a start's failure for one server.
type ServerError struct {
	Server string
	Err    error
}

func (e *ServerError) Error() string { return fmt.Sprintf("server %q: %v", e.Server, e.Err) }
func (e *ServerError) Unwrap() error { return e.Err }

// ParseConfig reads a config, the JSON the SDK sends (`mcp` of
// Sandbox.create): an object with one key per server. Every server it
// cannot satisfy is named in the error (a ServerError each, joined);
// servers come back sorted by name.
func ParseConfig(data []byte, l Layout) ([]*Server, error) {
	if len(data) > MaxConfigBytes {
		return nil, fmt.Errorf("config: larger than %d bytes", MaxConfigBytes)
	}
	var raw map[string]json.RawMessage
	if !isObject(data) {
		return nil, errors.New("config: must be a JSON object with one key per server")
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if len(raw) > MaxServers {
		return nil, fmt.Errorf("config: %d servers, at most %d", len(raw), MaxServers)
	}
	names := make([]string, 0, len(raw))
	for n := range raw {
		names = append(names, n)
	}
	slices.Sort(names)
	var out []*Server
	var errs []error
	for _, n := range names {
		s, err := parseServer(n, raw[n], l)
		if err != nil {
			errs = append(errs, &ServerError{Server: n, Err: err})
			continue
		}
		out = append(out, s)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

func parseServer(name string, raw json.RawMessage, l Layout) (*Server, error) {
	if strings.TrimSpace(string(raw)) == "null" {
		raw = json.RawMessage("{}")
	}
	if !isObject(raw) {
		return nil, errors.New("its settings must be a JSON object ({} for none)")
	}
	if rest, ok := strings.CutPrefix(name, "github/"); ok {
		return parseGitHub(name, rest, raw)
	}
	e, ok := Lookup(name)
	if !ok {
		return nil, unknownServer(name)
	}
	lc, err := e.launch(raw, l)
	if err != nil {
		return nil, err
	}
	return &Server{Name: name, Alias: name, Entry: e, Args: lc.args, Env: lc.env, Headers: lc.headers, Secrets: lc.secrets}, nil
}

// unknownServer is the error for a name the catalog does not have.
func unknownServer(name string) error {
	return fmt.Errorf("not in this gateway's catalog (it has: %s; or use github/<owner>/<repo> with runCmd); see docs/mcp.md",
		strings.Join(Names(), ", "))
}

var (
	ghOwner = regexp.MustCompile(`^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})$`)
	ghRepo  = regexp.MustCompile(`^[A-Za-z0-9._-]{1,100}$`)
	envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	unsafe  = regexp.MustCompile(`[^A-Za-z0-9_-]`)
)

func parseGitHub(name, rest string, raw json.RawMessage) (*Server, error) {
	owner, repo, ok := strings.Cut(rest, "/")
	if !ok || !ghOwner.MatchString(owner) || !ghRepo.MatchString(repo) || repo == "." || repo == ".." {
		return nil, errors.New("a repository server's name is github/<owner>/<repo> (letters, digits, '-', and '.' or '_' in the repository)")
	}
	var c struct {
		RunCmd     string            `json:"runCmd"`
		InstallCmd string            `json:"installCmd"`
		Envs       map[string]string `json:"envs"`
	}
	if err := decodeStrict(raw, &c); err != nil {
		return nil, err
	}
	if strings.TrimSpace(c.RunCmd) == "" {
		return nil, errors.New(`"runCmd" is required: the command that starts the stdio server in the repository's root`)
	}
	if strings.ContainsRune(c.RunCmd, 0) || strings.ContainsRune(c.InstallCmd, 0) {
		return nil, errors.New("commands must not contain NUL")
	}
	s := &Server{Name: name, Alias: unsafe.ReplaceAllString("github_"+owner+"_"+repo, "_"),
		GitHub: &GitHub{Owner: owner, Repo: repo, RunCmd: c.RunCmd, InstallCmd: c.InstallCmd}}
	keys := make([]string, 0, len(c.Envs))
	for k := range c.Envs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		v := c.Envs[k]
		if !envName.MatchString(k) {
			return nil, fmt.Errorf("envs: %q is not an environment variable name", k)
		}
		if strings.ContainsRune(v, 0) {
			return nil, fmt.Errorf("envs: the value of %s contains NUL", k)
		}
		s.Env = append(s.Env, k+"="+v)
		s.Secrets = append(s.Secrets, v)
	}
	return s, nil
}

// decodeStrict decodes a server's settings into v, refusing fields v does
// not have (a misspelt setting must not be ignored) and naming the field
// of a type error. Values never appear in its errors.
func decodeStrict(raw json.RawMessage, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	var te *json.UnmarshalTypeError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &te):
		return fmt.Errorf("%q must be of type %s", te.Field, goTypeName(te.Type.String()))
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return fmt.Errorf("unknown setting %s", strings.TrimPrefix(err.Error(), "json: unknown field "))
	default:
		return errors.New("its settings are not valid JSON")
	}
}

// goTypeName says a Go type of the settings in JSON's words.
func goTypeName(t string) string {
	switch {
	case t == "string":
		return "string"
	case strings.HasPrefix(t, "[]"):
		return "array of " + goTypeName(t[2:])
	case strings.HasPrefix(t, "map[string]"):
		return "object of " + goTypeName(t[len("map[string]"):])
	case t == "bool":
		return "boolean"
	default:
		return t
	}
}

func isObject(b []byte) bool {
	b = bytes.TrimSpace(b)
	return len(b) > 0 && b[0] == '{'
}
