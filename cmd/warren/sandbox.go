package main

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	pb "github.com/warren-sandbox/warren/api/envd/process"
	"github.com/warren-sandbox/warren/api/envd/process/processconnect"
	"github.com/warren-sandbox/warren/internal/envdproto"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/pkg/client"
)

// envdPort is envd's port in every sandbox.
var envdPort = strconv.Itoa(envdproto.Port)

// sandboxCommand is `warren sandbox list|create|exec|kill|logs|connect`:
// clients of a running warren serve, with the address and key of the
// template commands (E2B_API_URL, E2B_API_KEY; envd traffic goes to
// E2B_SANDBOX_URL, else the API URL, as the SDKs send it).
func sandboxCommand(stdout, stderr io.Writer) *cobra.Command {
	cmd := &cobra.Command{Use: "sandbox", Aliases: []string{"sbx"}, Short: "List, create, use and kill sandboxes of a running warren serve"}
	cmd.AddCommand(sandboxListCommand(stdout), sandboxCreateCommand(stdout), sandboxKillCommand(stdout),
		sandboxLogsCommand(stdout), sandboxExecCommand(stdout, stderr), sandboxConnectCommand(stdout))
	return cmd
}

func sandboxListCommand(stdout io.Writer) *cobra.Command {
	var api apiFlags
	var state string
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the team's sandboxes",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := api.client()
			if err != nil {
				return err
			}
			var states []string
			if state != "" {
				states = strings.Split(state, ",")
			}
			tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "SANDBOX ID\tTEMPLATE\tSTATE\tSTARTED\tEND\tCPU\tMEMORY MB")
			token := ""
			for {
				list, next, err := c.List(cmd.Context(), client.ListOptions{State: states, NextToken: token})
				if err != nil {
					return err
				}
				for _, s := range list {
					tpl := s.TemplateID
					if s.Alias != "" {
						tpl = s.Alias
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\n", s.SandboxID, tpl, s.State,
						s.StartedAt.Local().Format(time.DateTime), s.EndAt.Local().Format(time.DateTime), s.CPUCount, s.MemoryMB)
				}
				if next == "" {
					break
				}
				token = next
			}
			return tw.Flush()
		},
	}
	api.register(cmd.Flags())
	cmd.Flags().StringVar(&state, "state", "", "only sandboxes in these states (running,paused)")
	return cmd
}

func sandboxCreateCommand(stdout io.Writer) *cobra.Command {
	var api apiFlags
	var timeout time.Duration
	var meta []string
	cmd := &cobra.Command{
		Use:   "create [TEMPLATE]",
		Short: "Create a sandbox (of template base unless named) and print its ID",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := api.client()
			if err != nil {
				return err
			}
			req := client.NewSandbox{TemplateID: "base", Metadata: map[string]string{}}
			if len(args) == 1 {
				req.TemplateID = args[0]
			}
			secs := int(timeout / time.Second)
			req.Timeout = &secs
			for _, kv := range meta {
				k, v, ok := strings.Cut(kv, "=")
				if !ok || k == "" {
					return fmt.Errorf("--metadata %q: want KEY=VALUE: %w", kv, errdefs.ErrInvalid)
				}
				req.Metadata[k] = v
			}
			sb, err := c.Create(cmd.Context(), req)
			if err != nil {
				return err
			}
			fmt.Fprintln(stdout, sb.SandboxID)
			return nil
		},
	}
	api.register(cmd.Flags())
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Minute, "how long the sandbox lives")
	cmd.Flags().StringArrayVar(&meta, "metadata", nil, "KEY=VALUE metadata (repeatable)")
	return cmd
}

func sandboxKillCommand(stdout io.Writer) *cobra.Command {
	var api apiFlags
	cmd := &cobra.Command{
		Use:   "kill SANDBOX_ID...",
		Short: "Kill sandboxes",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := api.client()
			if err != nil {
				return err
			}
			var errs []error
			for _, id := range args {
				ok, err := c.Kill(cmd.Context(), id)
				switch {
				case err != nil:
					errs = append(errs, fmt.Errorf("kill %s: %w", id, err))
				case !ok:
					errs = append(errs, fmt.Errorf("sandbox %s: %w", id, errdefs.ErrNotFound))
				default:
					fmt.Fprintf(stdout, "killed %s\n", id)
				}
			}
			return errors.Join(errs...)
		},
	}
	api.register(cmd.Flags())
	return cmd
}

func sandboxLogsCommand(stdout io.Writer) *cobra.Command {
	var api apiFlags
	var level string
	var limit int
	cmd := &cobra.Command{
		Use:   "logs SANDBOX_ID",
		Short: "Print a sandbox's logs: lifecycle events, its start command's output, envd's lines",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := api.client()
			if err != nil {
				return err
			}
			path := fmt.Sprintf("/v2/sandboxes/%s/logs?limit=%d", args[0], limit)
			if level != "" {
				path += "&level=" + level
			}
			var out client.SandboxLogsV2
			if _, _, err := c.Do(cmd.Context(), http.MethodGet, path, nil, &out); err != nil {
				return err
			}
			for _, e := range out.Logs {
				line := fmt.Sprintf("%s %-5s %s", e.Timestamp.Local().Format("2006-01-02 15:04:05.000"), strings.ToUpper(e.Level), e.Message)
				for _, k := range sortedKeys(e.Fields) {
					line += fmt.Sprintf(" %s=%s", k, e.Fields[k])
				}
				fmt.Fprintln(stdout, line)
			}
			return nil
		},
	}
	api.register(cmd.Flags())
	cmd.Flags().StringVar(&level, "level", "", "minimum level: debug, info, warn, error")
	cmd.Flags().IntVar(&limit, "limit", 1000, "at most this many lines (1-1000)")
	return cmd
}

// exitError carries a command's exit code out of `warren sandbox exec`.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

func sandboxExecCommand(stdout, stderr io.Writer) *cobra.Command {
	var api apiFlags
	var user, cwd string
	cmd := &cobra.Command{
		Use:   "exec SANDBOX_ID -- COMMAND [ARG...]",
		Short: "Run a command in a sandbox (bash -l -c, as the SDK's commands.run) and stream its output",
		Args:  cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			e, err := api.envd(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			cfg := &pb.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-l", "-c", strings.Join(args[1:], " ")}}
			if cwd != "" {
				cfg.Cwd = &cwd
			}
			noStdin := false
			req := e.request(&pb.StartRequest{Process: cfg, Stdin: &noStdin}, user)
			st, err := e.proc.Start(cmd.Context(), req)
			if err != nil {
				return err
			}
			return exitOf(drain(st, stdout, stderr))
		},
	}
	api.register(cmd.Flags())
	cmd.Flags().StringVar(&user, "user", "", "user to run as (default: the sandbox's default user)")
	cmd.Flags().StringVar(&cwd, "cwd", "", "working directory")
	return cmd
}

// drain copies a process's output until it ends and returns its exit
// code.
// exitOf is the command's result for a process that ended with code:
// exitError for a non-zero code, so that warren exits with it.
func exitOf(code int, err error) error {
	if err != nil {
		return err
	}
	if code != 0 {
		return exitError{code}
	}
	return nil
}

func drain(st *connect.ServerStreamForClient[pb.StartResponse], stdout, stderr io.Writer) (int, error) {
	for st.Receive() {
		ev := st.Msg().GetEvent()
		if d := ev.GetData(); d != nil {
			stdout.Write(d.GetStdout())
			stdout.Write(d.GetPty())
			stderr.Write(d.GetStderr())
		}
		if end := ev.GetEnd(); end != nil {
			if end.GetError() != "" && end.GetExitCode() == 0 && !end.GetExited() {
				return -1, fmt.Errorf("process ended: %s", end.GetError())
			}
			return int(end.GetExitCode()), nil
		}
	}
	if err := st.Err(); err != nil {
		return -1, err
	}
	return -1, errors.New("the process stream ended without an end event")
}

// envdConn talks to one sandbox's envd through the server's proxy.
type envdConn struct {
	id, token string
	proc      processconnect.ProcessClient
}

// envd resumes the sandbox if needed (as `e2b sandbox connect` does) and
// returns a client of its envd, reached at E2B_SANDBOX_URL (else the API
// URL) with the routing headers.
func (a *apiFlags) envd(ctx context.Context, id string) (*envdConn, error) {
	c, err := a.client()
	if err != nil {
		return nil, err
	}
	sb, _, err := c.Connect(ctx, id, 300)
	if err != nil {
		return nil, err
	}
	base := os.Getenv("E2B_SANDBOX_URL")
	if base == "" {
		base = a.apiURL()
	}
	e := &envdConn{id: id, token: sb.EnvdAccessToken}
	hc := &http.Client{Transport: routing{id: id, next: http.DefaultTransport}}
	e.proc = processconnect.NewProcessClient(hc, strings.TrimSuffix(base, "/"), connect.WithProtoJSON())
	return e, nil
}

// request wraps msg with the access token and the user (Basic auth, as
// the SDKs send it).
func request[T any](e *envdConn, msg *T, user string) *connect.Request[T] {
	r := connect.NewRequest(msg)
	if e.token != "" {
		r.Header().Set("X-Access-Token", e.token)
	}
	if user != "" {
		r.Header().Set("Authorization", "Basic "+basicUser(user))
	}
	return r
}

func (e *envdConn) request(msg *pb.StartRequest, user string) *connect.Request[pb.StartRequest] {
	return request(e, msg, user)
}

func basicUser(user string) string { return base64.StdEncoding.EncodeToString([]byte(user + ":")) }

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// routing adds the headers that route envd traffic to a sandbox.
type routing struct {
	id   string
	next http.RoundTripper
}

func (r routing) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set("E2b-Sandbox-Id", r.id)
	req.Header.Set("E2b-Sandbox-Port", envdPort)
	return r.next.RoundTrip(req)
}
