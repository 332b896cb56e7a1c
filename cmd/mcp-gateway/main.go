// Command mcp-gateway is Warren's MCP gateway, in the `mcp-gateway`
// template's root filesystem (internal/mcpgateway, docs/mcp.md):
//
//	mcp-gateway --config '<json>'   start the gateway (Sandbox.create({mcp}) runs it as root)
//	mcp-gateway pull NAME...        install catalog servers (Template().addMcpServer)
//	mcp-gateway catalog             list the catalog's servers
//	mcp-gateway serve               the serving process --config starts (internal)
//	mcp-gateway prepare-image --root DIR
//	                                fill DIR with the catalog's npm cache and preinstalled
//	                                servers (scripts/build-mcp-gateway-rootfs.sh)
//
// It is a static binary (CGO_ENABLED=0).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/warren-sandbox/warren/internal/mcpgateway"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is the command line; it returns the exit code (2: usage).
func run(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	l := mcpgateway.DefaultLayout()
	cmd := ""
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	var err error
	switch cmd {
	case "":
		err = start(ctx, l, args, stdout)
	case "pull":
		err = pull(ctx, l, args, stdout)
	case "catalog":
		err = listCatalog(stdout)
	case "serve":
		ready := os.NewFile(3, "ready")
		if ready == nil {
			err = errors.New("serve is started by mcp-gateway --config")
			break
		}
		err = mcpgateway.RunServe(ctx, l, os.Stdin, ready, os.Stderr)
	case "prepare-image":
		fs := flag.NewFlagSet("prepare-image", flag.ContinueOnError)
		fs.SetOutput(stderr)
		fs.StringVar(&l.Root, "root", "", "the gateway's root directory in the image being made")
		if err := fs.Parse(args); err != nil || l.Root == "" || fs.NArg() > 0 {
			fmt.Fprintln(stderr, "usage: mcp-gateway prepare-image --root DIR")
			return 2
		}
		err = mcpgateway.PrepareImage(ctx, l, stdout)
	default:
		fmt.Fprintf(stderr, "mcp-gateway: unknown command %q\n%s", cmd, usage)
		return 2
	}
	var usageErr *usageError
	switch {
	case errors.As(err, &usageErr):
		fmt.Fprintf(stderr, "mcp-gateway: %v\n%s", err, usage)
		return 2
	case err != nil:
		fmt.Fprintf(stderr, "mcp-gateway: %v\n", err)
		return 1
	}
	return 0
}

const usage = `usage:
  mcp-gateway --config '<json>'   start the gateway on port 50005
  mcp-gateway pull NAME...        install catalog servers
  mcp-gateway catalog             list the catalog
`

type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

// start is --config: the gateway starts, with $GATEWAY_ACCESS_TOKEN as its
// token when set.
func start(ctx context.Context, l mcpgateway.Layout, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("mcp-gateway", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	config := fs.String("config", "", "")
	if err := fs.Parse(args); err != nil {
		return &usageError{err.Error()}
	}
	if *config == "" || fs.NArg() > 0 {
		return &usageError{"--config '<json>' is required"}
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	st, err := mcpgateway.Start(ctx, mcpgateway.StartOptions{Config: []byte(*config), Token: os.Getenv(mcpgateway.TokenEnv),
		Layout: l, Exe: exe, Args: []string{"serve"}})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "mcp-gateway: serving %d server(s) on %s (pid %d): %s\n", len(st.Servers), st.Addr, st.PID, strings.Join(st.Servers, ", "))
	return nil
}

func pull(ctx context.Context, l mcpgateway.Layout, args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return &usageError{"pull: name at least one catalog server"}
	}
	return mcpgateway.Pull(ctx, l, args, stdout)
}

func listCatalog(stdout io.Writer) error {
	for _, e := range mcpgateway.Catalog() {
		v, err := e.Version()
		if err != nil {
			return err
		}
		what := "npm " + e.Package + "@" + v
		switch {
		case e.Remote():
			what = "remote " + e.URL
		case e.Preinstalled:
			what += " (preinstalled)"
		}
		fmt.Fprintf(stdout, "%-20s %s\n    %s\n", e.Name, what, e.Title)
		if e.Settings != "" {
			fmt.Fprintf(stdout, "    settings: %s\n", e.Settings)
		}
	}
	return nil
}
