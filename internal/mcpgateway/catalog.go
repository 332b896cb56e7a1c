package mcpgateway

import (
	"cmp"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"path/filepath"
	"slices"
)

// Entry is a named server of the catalog: a stdio server installed from
// npm, or a remote server reached at its URL.
type Entry struct {
	// Name is the key of the config and of `mcp-gateway pull` (the SDK's
	// McpServer key where it has one).
	Name string
	// Title says what the server does (docs/mcp.md, `mcp-gateway
	// catalog`).
	Title string
	// Package is an npm server's package; catalog/<Name>/package.json and
	// its package-lock.json pin it and its whole dependency tree. Bin is
	// the executable it installs.
	Package, Bin string
	// Preinstalled npm servers are installed when the template's root
	// filesystem is made; the others at `mcp-gateway pull` or, failing
	// that, at start (offline, from the npm cache the root filesystem
	// holds).
	Preinstalled bool
	// URL is a remote server's streamable HTTP endpoint.
	URL string
	// Settings describes the config's fields ("" for none).
	Settings string
	// launch reads the config's settings of the server.
	launch func(raw json.RawMessage, l Layout) (launch, error)
}

// launch is what a server's settings add to its start.
type launch struct {
	args, env, secrets []string
	headers            map[string]string
}

// noSettings is the launch of a server without settings.
func noSettings(raw json.RawMessage, _ Layout) (launch, error) {
	var c struct{}
	return launch{}, decodeStrict(raw, &c)
}

// catalog is every named server, by name. Adding one: docs/mcp.md.
var catalog = []*Entry{
	{
		Name: "filesystem", Title: "Files in the directories it is given: read, write, edit, move, search, list (reference server).",
		Package: "@modelcontextprotocol/server-filesystem", Bin: "mcp-server-filesystem", Preinstalled: true,
		Settings: `paths: absolute directories the server may use (required)`,
		launch: func(raw json.RawMessage, _ Layout) (launch, error) {
			var c struct {
				Paths []string `json:"paths"`
			}
			if err := decodeStrict(raw, &c); err != nil {
				return launch{}, err
			}
			if len(c.Paths) == 0 {
				return launch{}, errors.New(`"paths" is required: the directories the server may use`)
			}
			for _, p := range c.Paths {
				if !filepath.IsAbs(p) || filepath.Clean(p) != p {
					return launch{}, fmt.Errorf(`"paths": %q is not a clean absolute path`, p)
				}
			}
			return launch{args: c.Paths}, nil
		},
	},
	{
		Name: "memory", Title: "A knowledge graph kept in a file of the sandbox: entities, relations, observations (reference server).",
		Package: "@modelcontextprotocol/server-memory", Bin: "mcp-server-memory", Preinstalled: true,
		launch: func(raw json.RawMessage, l Layout) (launch, error) {
			lc, err := noSettings(raw, l)
			lc.env = []string{"MEMORY_FILE_PATH=" + filepath.Join(l.StateDir, "memory.jsonl")}
			return lc, err
		},
	},
	{
		Name: "everything", Title: "Every feature of the protocol: tools, prompts, resources, templates, completions (reference test server).",
		Package: "@modelcontextprotocol/server-everything", Bin: "mcp-server-everything", Preinstalled: true,
		launch: func(raw json.RawMessage, l Layout) (launch, error) {
			lc, err := noSettings(raw, l)
			lc.args = []string{"stdio"}
			return lc, err
		},
	},
	{
		Name: "sequentialthinking", Title: "Step-by-step problem solving through revisable thoughts (reference server).",
		Package: "@modelcontextprotocol/server-sequential-thinking", Bin: "mcp-server-sequential-thinking",
		launch: func(raw json.RawMessage, l Layout) (launch, error) {
			lc, err := noSettings(raw, l)
			lc.env = []string{"DISABLE_THOUGHT_LOGGING=true"}
			return lc, err
		},
	},
	{
		Name: "astroDocs", Title: "The Astro web framework's documentation (remote; needs the sandbox's internet access).",
		URL: "https://mcp.docs.astro.build/mcp", launch: noSettings,
	},
	{
		Name: "cloudflareDocs", Title: "Cloudflare's product documentation (remote; needs the sandbox's internet access).",
		URL: "https://docs.mcp.cloudflare.com/mcp", launch: noSettings,
	},
}

// Lookup returns the catalog's entry called name.
func Lookup(name string) (*Entry, bool) {
	i := slices.IndexFunc(catalog, func(e *Entry) bool { return e.Name == name })
	if i < 0 {
		return nil, false
	}
	return catalog[i], true
}

// Names lists the catalog's names, sorted.
func Names() []string {
	out := make([]string, len(catalog))
	for i, e := range catalog {
		out[i] = e.Name
	}
	slices.Sort(out)
	return out
}

// Catalog returns the catalog's entries, sorted by name.
func Catalog() []*Entry {
	out := slices.Clone(catalog)
	slices.SortFunc(out, func(a, b *Entry) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// Remote reports whether e is reached at a URL (nothing to install).
func (e *Entry) Remote() bool { return e.URL != "" }

//go:embed catalog/*/package.json catalog/*/package-lock.json
var lockfiles embed.FS

// pinFiles returns e's package.json and package-lock.json.
func (e *Entry) pinFiles() (pkg, lock []byte, err error) {
	dir := path.Join("catalog", e.Name)
	if pkg, err = fs.ReadFile(lockfiles, path.Join(dir, "package.json")); err != nil {
		return nil, nil, fmt.Errorf("catalog entry %s: %w", e.Name, err)
	}
	if lock, err = fs.ReadFile(lockfiles, path.Join(dir, "package-lock.json")); err != nil {
		return nil, nil, fmt.Errorf("catalog entry %s: %w", e.Name, err)
	}
	return pkg, lock, nil
}

// Version is the version of e's package its lockfile pins ("" for a
// remote server).
func (e *Entry) Version() (string, error) {
	if e.Remote() {
		return "", nil
	}
	_, lock, err := e.pinFiles()
	if err != nil {
		return "", err
	}
	var l struct {
		Packages map[string]struct {
			Version string `json:"version"`
		} `json:"packages"`
	}
	if err := json.Unmarshal(lock, &l); err != nil {
		return "", fmt.Errorf("catalog entry %s: lockfile: %w", e.Name, err)
	}
	p, ok := l.Packages["node_modules/"+e.Package]
	if !ok || p.Version == "" {
		return "", fmt.Errorf("catalog entry %s: the lockfile does not pin %s", e.Name, e.Package)
	}
	return p.Version, nil
}
