package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/warren-sandbox/warren/internal/nodereg"
)

// addNodeAdminCommands adds `list`, `drain ID`, `cordon ID` and
// `uncordon ID` to cmd (the `warren node` command): they go through the
// admin API of a running warren api or serve (GET /admin/nodes, POST
// /admin/nodes/{id}/drain|cordon|uncordon). Each subcommand has its own
// --url and --admin-token, so the node command's flags are untouched.
func addNodeAdminCommands(cmd *cobra.Command) {
	flags := func(c *cobra.Command, url, token *string) {
		c.Flags().StringVar(url, "url", os.Getenv("E2B_API_URL"), "API URL of the running warren api or serve (env E2B_API_URL)")
		c.Flags().StringVar(token, "admin-token", os.Getenv("WARREN_ADMIN_TOKEN"), "admin token (env WARREN_ADMIN_TOKEN)")
	}
	var listURL, listToken string
	list := &cobra.Command{
		Use:   "list",
		Short: "List the registered nodes",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			var nodes []nodereg.NodeInfo
			if err := nodeAdmin(c, listURL, listToken, http.MethodGet, "/admin/nodes", &nodes); err != nil {
				return fmt.Errorf("list nodes: %w", err)
			}
			tw := tabwriter.NewWriter(c.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tSTATUS\tADDRESS\tVCPUS\tMEMORY MIB\tSANDBOXES\tLAST HEARTBEAT")
			for _, n := range nodes {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d/%d\t%d/%d\t%d\t%s\n", n.ID, n.Status, n.RPCAddress, n.Allocated.VCPUs, n.Capacity.VCPUs,
					n.Allocated.MemoryMB, n.Capacity.MemoryMB, n.Sandboxes, n.LastHeartbeat.Format(time.RFC3339))
			}
			return tw.Flush()
		},
	}
	flags(list, &listURL, &listToken)
	cmd.AddCommand(list)
	for _, a := range []struct{ name, short string }{
		{"drain", "Stop placing sandboxes on a node and stop its pools refilling; its sandboxes run out"},
		{"cordon", "Stop placing sandboxes on a node"},
		{"uncordon", "Place sandboxes on a drained or cordoned node again"},
	} {
		var url, token string
		sub := &cobra.Command{
			Use:   a.name + " ID",
			Short: a.short,
			Args:  cobra.ExactArgs(1),
			RunE: func(c *cobra.Command, args []string) error {
				var n nodereg.NodeInfo
				if err := nodeAdmin(c, url, token, http.MethodPost, "/admin/nodes/"+args[0]+"/"+a.name, &n); err != nil {
					return fmt.Errorf("%s node %s: %w", a.name, args[0], err)
				}
				fmt.Fprintf(c.OutOrStdout(), "node %s: %s\n", n.ID, n.Status)
				return nil
			},
		}
		flags(sub, &url, &token)
		cmd.AddCommand(sub)
	}
}

// nodeAdmin calls the admin API and decodes its answer into out.
func nodeAdmin(c *cobra.Command, url, token, method, path string, out any) error {
	if url == "" || token == "" {
		return fmt.Errorf("--url and --admin-token (or E2B_API_URL and WARREN_ADMIN_TOKEN) are required")
	}
	req, err := http.NewRequestWithContext(c.Context(), method, strings.TrimRight(url, "/")+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("X-Admin-Token", token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if resp.StatusCode/100 != 2 {
		var e struct{ Message string }
		if json.Unmarshal(b, &e) == nil && e.Message != "" {
			return fmt.Errorf("%s: %s", resp.Status, e.Message)
		}
		return fmt.Errorf("%s", resp.Status)
	}
	return json.Unmarshal(b, out)
}
