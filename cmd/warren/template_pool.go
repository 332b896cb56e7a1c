package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/warren-sandbox/warren/internal/apiserver"
)

// templatePoolCommand is `warren template pool set|list`: warm pools live
// in the running server's node agent, so these go through its admin API
// (PUT /admin/templates/{templateID}/pool, GET /admin/pools).
func templatePoolCommand(team *string) *cobra.Command {
	var url, token string
	cmd := &cobra.Command{Use: "pool", Short: "Warm pools of ready sandboxes (through the running server's admin API)"}
	pf := cmd.PersistentFlags()
	pf.StringVar(&url, "url", os.Getenv("E2B_API_URL"), "API URL of the running warren serve (env E2B_API_URL)")
	pf.StringVar(&token, "admin-token", os.Getenv("WARREN_ADMIN_TOKEN"), "admin token (env WARREN_ADMIN_TOKEN)")
	do := func(ctx context.Context, method, path string, body any, out any) error {
		if url == "" || token == "" {
			return fmt.Errorf("--url and --admin-token (or E2B_API_URL and WARREN_ADMIN_TOKEN) are required")
		}
		var rd io.Reader
		if body != nil {
			b, err := json.Marshal(body)
			if err != nil {
				return err
			}
			rd = bytes.NewReader(b)
		}
		req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(url, "/")+path, rd)
		if err != nil {
			return err
		}
		req.Header.Set("X-Admin-Token", token)
		req.Header.Set("X-Team-ID", *team)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if resp.StatusCode/100 != 2 {
			var e struct{ Message string }
			if json.Unmarshal(b, &e) == nil && e.Message != "" {
				return fmt.Errorf("%s: %s", resp.Status, e.Message)
			}
			return fmt.Errorf("%s", resp.Status)
		}
		return json.Unmarshal(b, out)
	}
	var size int
	set := &cobra.Command{
		Use:   "set NAME|ID --size N",
		Short: "Keep N ready sandboxes of a template (0 removes the pool)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !cmd.Flags().Changed("size") {
				return fmt.Errorf("--size is required")
			}
			var st apiserver.PoolStatus
			if err := do(cmd.Context(), http.MethodPut, "/admin/templates/"+args[0]+"/pool", map[string]int{"size": size}, &st); err != nil {
				return fmt.Errorf("pool of %s: %w", args[0], err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "pool of %s (build %s): size %d, %d ready\n", st.TemplateID, st.BuildID, st.Size, st.Ready)
			return nil
		},
	}
	set.Flags().IntVar(&size, "size", 0, "number of ready sandboxes to keep")
	list := &cobra.Command{
		Use:   "list",
		Short: "List the warm pools",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var pools []apiserver.PoolStatus
			if err := do(cmd.Context(), http.MethodGet, "/admin/pools", nil, &pools); err != nil {
				return fmt.Errorf("pools: %w", err)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TEMPLATE\tBUILD\tSIZE\tREADY")
			for _, p := range pools {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%d\n", p.TemplateID, p.BuildID, p.Size, p.Ready)
			}
			return tw.Flush()
		},
	}
	cmd.AddCommand(set, list)
	return cmd
}
