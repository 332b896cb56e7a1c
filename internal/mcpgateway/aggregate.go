package mcpgateway

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/yosida95/uritemplate/v3"
)

// aliasSep joins a server's alias and a tool's or prompt's name when
// another server offers the same name.
const aliasSep = "__"

// Gateway is the aggregating MCP server: every backend's tools, prompts,
// resources and resource templates, as one server.
//
// Names: a tool or prompt keeps its name when one server offers it, and
// becomes <alias>__<name> when several do (the alias is the catalog name,
// or github_<owner>_<repo>). Resources and templates keep their URIs;
// when two servers offer the same one, the first by server name serves
// it. A server that goes down has its offer withdrawn (clients get
// list_changed).
type Gateway struct {
	log *slog.Logger

	mu        sync.Mutex
	server    *mcp.Server
	backends  []*backend // by server name
	tools     map[string]entryRoute[*mcp.Tool]
	prompts   map[string]entryRoute[*mcp.Prompt]
	resources map[string]entryRoute[*mcp.Resource]
	templates map[string]entryRoute[*mcp.ResourceTemplate]
}

// entryRoute is what a name of the aggregate is: the backend and the
// item as the backend offers it.
type entryRoute[T any] struct {
	b    *backend
	item T
}

// newGateway aggregates backends (sorted by server name) into one server.
func newGateway(backends []*backend, log *slog.Logger) *Gateway {
	g := &Gateway{log: log, backends: backends,
		tools: map[string]entryRoute[*mcp.Tool]{}, prompts: map[string]entryRoute[*mcp.Prompt]{},
		resources: map[string]entryRoute[*mcp.Resource]{}, templates: map[string]entryRoute[*mcp.ResourceTemplate]{}}
	var names []string
	var instr []string
	for _, b := range backends {
		names = append(names, b.srv.Name)
		if s := strings.TrimSpace(b.session.InitializeResult().Instructions); s != "" {
			instr = append(instr, "## "+b.srv.Name+"\n\n"+s)
		}
	}
	opts := &mcp.ServerOptions{
		Logger: log,
		// Offered even while no server offers any: servers' lists change.
		Capabilities: &mcp.ServerCapabilities{
			Tools:     &mcp.ToolCapabilities{ListChanged: true},
			Prompts:   &mcp.PromptCapabilities{ListChanged: true},
			Resources: &mcp.ResourceCapabilities{ListChanged: true},
		},
		CompletionHandler: g.complete,
	}
	if len(instr) > 0 {
		opts.Instructions = "This gateway aggregates the MCP servers " + strings.Join(names, ", ") + ".\n\n" + strings.Join(instr, "\n\n")
	}
	g.server = mcp.NewServer(&mcp.Implementation{Name: "warren-mcp-gateway", Title: "Warren MCP gateway", Version: Version}, opts)
	g.sync()
	return g
}

// Server is the aggregate, for a transport to serve.
func (g *Gateway) Server() *mcp.Server { return g.server }

// sync makes the aggregate offer what the backends offer now.
func (g *Gateway) sync() {
	g.mu.Lock()
	defer g.mu.Unlock()
	wantTools := map[string]entryRoute[*mcp.Tool]{}
	wantPrompts := map[string]entryRoute[*mcp.Prompt]{}
	wantResources := map[string]entryRoute[*mcp.Resource]{}
	wantTemplates := map[string]entryRoute[*mcp.ResourceTemplate]{}
	toolCount, promptCount := map[string]int{}, map[string]int{}
	type offer struct {
		b         *backend
		tools     []*mcp.Tool
		prompts   []*mcp.Prompt
		resources []*mcp.Resource
		templates []*mcp.ResourceTemplate
	}
	var offers []offer
	for _, b := range g.backends {
		up, t, p, r, rt := b.snapshot()
		if !up {
			continue
		}
		offers = append(offers, offer{b, t, p, r, rt})
		for _, x := range t {
			toolCount[x.Name]++
		}
		for _, x := range p {
			promptCount[x.Name]++
		}
	}
	for _, o := range offers {
		for _, t := range o.tools {
			name := t.Name
			if toolCount[name] > 1 {
				name = o.b.srv.Alias + aliasSep + name
			}
			if !objectSchema(t.InputSchema) {
				g.log.Warn("tool left out: its input schema is not an object schema", "server", o.b.srv.Name, "tool", t.Name)
				continue
			}
			wantTools[name] = entryRoute[*mcp.Tool]{o.b, t}
		}
		for _, p := range o.prompts {
			name := p.Name
			if promptCount[name] > 1 {
				name = o.b.srv.Alias + aliasSep + name
			}
			wantPrompts[name] = entryRoute[*mcp.Prompt]{o.b, p}
		}
		for _, r := range o.resources {
			if prev, ok := wantResources[r.URI]; ok {
				g.log.Warn("resource offered twice: the first server serves it", "uri", r.URI, "server", prev.b.srv.Name, "also", o.b.srv.Name)
				continue
			}
			wantResources[r.URI] = entryRoute[*mcp.Resource]{o.b, r}
		}
		for _, rt := range o.templates {
			if _, err := uritemplate.New(rt.URITemplate); err != nil {
				g.log.Warn("resource template left out: invalid URI template", "server", o.b.srv.Name, "uri_template", rt.URITemplate)
				continue
			}
			if _, ok := wantTemplates[rt.URITemplate]; ok {
				continue
			}
			wantTemplates[rt.URITemplate] = entryRoute[*mcp.ResourceTemplate]{o.b, rt}
		}
	}

	var gone []string
	for name, cur := range g.tools {
		if w, ok := wantTools[name]; !ok || w.b != cur.b || !sameJSON(w.item, cur.item) {
			gone = append(gone, name)
			delete(g.tools, name)
		}
	}
	g.server.RemoveTools(gone...)
	for name, w := range wantTools {
		if _, ok := g.tools[name]; ok {
			continue
		}
		t := *w.item
		t.Name = name
		g.server.AddTool(&t, toolHandler(w.b, w.item.Name))
		g.tools[name] = w
	}

	gone = gone[:0]
	for name, cur := range g.prompts {
		if w, ok := wantPrompts[name]; !ok || w.b != cur.b || !sameJSON(w.item, cur.item) {
			gone = append(gone, name)
			delete(g.prompts, name)
		}
	}
	g.server.RemovePrompts(gone...)
	for name, w := range wantPrompts {
		if _, ok := g.prompts[name]; ok {
			continue
		}
		p := *w.item
		p.Name = name
		g.server.AddPrompt(&p, promptHandler(w.b, w.item.Name))
		g.prompts[name] = w
	}

	gone = gone[:0]
	for uri, cur := range g.resources {
		if w, ok := wantResources[uri]; !ok || w.b != cur.b || !sameJSON(w.item, cur.item) {
			gone = append(gone, uri)
			delete(g.resources, uri)
		}
	}
	g.server.RemoveResources(gone...)
	for uri, w := range wantResources {
		if _, ok := g.resources[uri]; ok {
			continue
		}
		r := *w.item
		g.server.AddResource(&r, resourceHandler(w.b))
		g.resources[uri] = w
	}

	gone = gone[:0]
	for ut, cur := range g.templates {
		if w, ok := wantTemplates[ut]; !ok || w.b != cur.b || !sameJSON(w.item, cur.item) {
			gone = append(gone, ut)
			delete(g.templates, ut)
		}
	}
	g.server.RemoveResourceTemplates(gone...)
	for ut, w := range wantTemplates {
		if _, ok := g.templates[ut]; ok {
			continue
		}
		rt := *w.item
		g.server.AddResourceTemplate(&rt, resourceHandler(w.b))
		g.templates[ut] = w
	}
}

// toolHandler calls the backend's tool name with the caller's arguments
// and returns its result as it is.
func toolHandler(b *backend, name string) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		p := &mcp.CallToolParams{Name: name}
		if len(req.Params.Arguments) > 0 {
			p.Arguments = req.Params.Arguments
		}
		res, err := b.session.CallTool(ctx, p)
		if err != nil {
			return nil, fmt.Errorf("server %s: %w", b.srv.Name, err)
		}
		return res, nil
	}
}

func promptHandler(b *backend, name string) mcp.PromptHandler {
	return func(ctx context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		res, err := b.session.GetPrompt(ctx, &mcp.GetPromptParams{Name: name, Arguments: req.Params.Arguments})
		if err != nil {
			return nil, fmt.Errorf("server %s: %w", b.srv.Name, err)
		}
		return res, nil
	}
}

func resourceHandler(b *backend) mcp.ResourceHandler {
	return func(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		res, err := b.session.ReadResource(ctx, &mcp.ReadResourceParams{URI: req.Params.URI})
		if err != nil {
			return nil, fmt.Errorf("server %s: %w", b.srv.Name, err)
		}
		return res, nil
	}
}

// complete sends a completion request to the server of the prompt or
// resource template it refers to.
func (g *Gateway) complete(ctx context.Context, req *mcp.CompleteRequest) (*mcp.CompleteResult, error) {
	empty := &mcp.CompleteResult{Completion: mcp.CompletionResultDetails{Values: []string{}}}
	ref := req.Params.Ref
	if ref == nil {
		return empty, nil
	}
	p := *req.Params
	r := *ref
	p.Ref = &r
	g.mu.Lock()
	var b *backend
	switch ref.Type {
	case "ref/prompt":
		if w, ok := g.prompts[ref.Name]; ok {
			b, r.Name = w.b, w.item.Name
		}
	case "ref/resource":
		if w, ok := g.templates[ref.URI]; ok {
			b = w.b
		}
	}
	g.mu.Unlock()
	if b == nil {
		return empty, nil
	}
	caps := b.session.InitializeResult().Capabilities
	if caps == nil || caps.Completions == nil {
		return empty, nil
	}
	res, err := b.session.Complete(ctx, &p)
	if err != nil {
		return nil, fmt.Errorf("server %s: %w", b.srv.Name, err)
	}
	return res, nil
}

// objectSchema reports whether s is an input schema the aggregate can
// offer: a JSON object schema of type "object".
func objectSchema(s any) bool {
	var m map[string]any
	b, err := json.Marshal(s)
	if err != nil || json.Unmarshal(b, &m) != nil {
		return false
	}
	return m["type"] == "object"
}

// sameJSON reports whether a and b have the same JSON.
func sameJSON(a, b any) bool {
	if reflect.DeepEqual(a, b) {
		return true
	}
	ja, err1 := json.Marshal(a)
	jb, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && string(ja) == string(jb)
}
