package mcpgateway

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The test binary is also the processes the tests start: a stdio MCP
// server ($MCPGW_TEST_SERVER names which) and the gateway's serving
// process ($MCPGW_TEST_SERVE).
func TestMain(m *testing.M) {
	if name := os.Getenv("MCPGW_TEST_SERVER"); name != "" {
		os.Exit(runTestServer(name))
	}
	if os.Getenv("MCPGW_TEST_SERVE") != "" {
		os.Exit(runTestServe())
	}
	os.Exit(m.Run())
}

// runTestServe is the serving process of the daemon tests, with the
// layout they pass in $MCPGW_TEST_LAYOUT (testLayoutEnv).
func runTestServe() int {
	l := testLayoutFromEnv()
	err := RunServe(context.Background(), l, os.Stdin, os.NewFile(3, "ready"), os.Stderr)
	if err != nil {
		return 1
	}
	return 0
}

func testLayoutFromEnv() Layout {
	parts := strings.Split(os.Getenv("MCPGW_TEST_LAYOUT"), "|")
	l := DefaultLayout()
	l.Root, l.TokenFile, l.LogFile, l.Addr = parts[0], parts[1], parts[2], parts[3]
	l.StateDir, l.GitHubURL = l.Root, "file:///nonexistent"
	l.StartTimeout = 20 * time.Second
	return l
}

// testLayoutEnv is $MCPGW_TEST_LAYOUT for l.
func testLayoutEnv(l Layout) string {
	return strings.Join([]string{l.Root, l.TokenFile, l.LogFile, l.Addr}, "|")
}

type echoArgs struct {
	Text string `json:"text"`
}

// runTestServer serves, on stdio, the server the aggregation tests use:
//
//   - tools "shared" and "<name>_only" (answering "<name>: <text>"),
//     "add_tool" (adds "late_<name>" and so sends list_changed), "exit"
//     (the process exits 3), and "env" (the value of $TEST_VALUE);
//   - prompt "shared" and resource test://<name>/doc, template
//     test://<name>/item/{id};
//
// and for name "fail", writes $TEST_VALUE to stderr and exits 3 before
// any protocol; for "mute", never answers.
func runTestServer(name string) int {
	switch name {
	case "fail":
		fmt.Fprintf(os.Stderr, "boom: the key %s was refused\n", os.Getenv("TEST_VALUE"))
		return 3
	case "mute":
		time.Sleep(time.Hour)
		return 0
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "test-" + name, Version: "1"}, &mcp.ServerOptions{Instructions: "use " + name})
	echo := func(tool string) mcp.ToolHandlerFor[echoArgs, any] {
		return func(_ context.Context, _ *mcp.CallToolRequest, a echoArgs) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: name + "/" + tool + ": " + a.Text}}}, nil, nil
		}
	}
	mcp.AddTool(s, &mcp.Tool{Name: "shared", Description: "in every test server"}, echo("shared"))
	mcp.AddTool(s, &mcp.Tool{Name: name + "_only"}, echo(name+"_only"))
	mcp.AddTool(s, &mcp.Tool{Name: "env"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: os.Getenv("TEST_VALUE")}}}, nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "add_tool"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		mcp.AddTool(s, &mcp.Tool{Name: "late_" + name}, echo("late_"+name))
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "added"}}}, nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "exit"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		go func() { time.Sleep(50 * time.Millisecond); os.Exit(3) }()
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "bye"}}}, nil, nil
	})
	s.AddPrompt(&mcp.Prompt{Name: "shared", Arguments: []*mcp.PromptArgument{{Name: "topic"}}},
		func(_ context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
			return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{{Role: "user",
				Content: &mcp.TextContent{Text: name + " prompt about " + req.Params.Arguments["topic"]}}}}, nil
		})
	s.AddResource(&mcp.Resource{Name: "doc", URI: "test://" + name + "/doc", MIMEType: "text/plain"},
		func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: req.Params.URI, Text: name + " doc"}}}, nil
		})
	s.AddResourceTemplate(&mcp.ResourceTemplate{Name: "item", URITemplate: "test://" + name + "/item/{id}"},
		func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: req.Params.URI, Text: name + " item " + req.Params.URI}}}, nil
		})
	if err := s.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		return 1
	}
	return 0
}
