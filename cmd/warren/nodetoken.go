package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/warren-sandbox/warren/internal/nodeauth"
	"github.com/warren-sandbox/warren/internal/nodereg"
)

// addNodeTokenCommands adds `token create|list|revoke|credential` to cmd
// (the `warren node` command): each node's own token, issued and revoked
// through the admin API of a running warren api (POST, GET
// /admin/nodes/{id}/tokens, DELETE /admin/nodes/{id}/tokens/{tokenID}).
func addNodeTokenCommands(cmd *cobra.Command) {
	tok := &cobra.Command{Use: "token", Short: "Issue, list and revoke nodes' own tokens (warren api)"}
	flags := func(c *cobra.Command, url, token *string) {
		c.Flags().StringVar(url, "url", os.Getenv("E2B_API_URL"), "API URL of the running warren api (env E2B_API_URL)")
		c.Flags().StringVar(token, "admin-token", os.Getenv("WARREN_ADMIN_TOKEN"), "admin token (env WARREN_ADMIN_TOKEN)")
	}

	var cURL, cToken, name string
	create := &cobra.Command{
		Use:   "create NODE_ID",
		Short: "Issue a token for node NODE_ID and print it (shown once; it registers that node only)",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			body, _ := json.Marshal(map[string]string{"name": name})
			var out nodereg.IssuedToken
			if err := adminCall(c, cURL, cToken, http.MethodPost, "/admin/nodes/"+args[0]+"/tokens", body, &out); err != nil {
				return fmt.Errorf("create token of node %s: %w", args[0], err)
			}
			fmt.Fprintln(c.OutOrStdout(), out.Token)
			fmt.Fprintf(c.ErrOrStderr(), "# token %s of node %s: give it to that node alone (--node-token-file, WARREN_NODE_TOKEN); revoke with `warren node token revoke %s %s`\n",
				out.ID, out.NodeID, out.NodeID, out.ID)
			return nil
		},
	}
	flags(create, &cURL, &cToken)
	create.Flags().StringVar(&name, "name", "", "a note kept with the token")
	tok.AddCommand(create)

	var lURL, lToken string
	list := &cobra.Command{
		Use:   "list NODE_ID",
		Short: "List node NODE_ID's tokens (never the tokens themselves)",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			var out []nodereg.TokenInfo
			if err := adminCall(c, lURL, lToken, http.MethodGet, "/admin/nodes/"+args[0]+"/tokens", nil, &out); err != nil {
				return fmt.Errorf("list tokens of node %s: %w", args[0], err)
			}
			tw := tabwriter.NewWriter(c.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tNAME\tCREATED\tLAST USED\tREVOKED")
			for _, t := range out {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", t.ID, t.Name, t.CreatedAt.Format(time.RFC3339), when(t.LastUsedAt), when(t.RevokedAt))
			}
			return tw.Flush()
		},
	}
	flags(list, &lURL, &lToken)
	tok.AddCommand(list)

	var rURL, rToken string
	revoke := &cobra.Command{
		Use:   "revoke NODE_ID TOKEN_ID",
		Short: "Revoke a token: the node it was given to is refused from its next call",
		Args:  cobra.ExactArgs(2),
		RunE: func(c *cobra.Command, args []string) error {
			var out nodereg.TokenInfo
			if err := adminCall(c, rURL, rToken, http.MethodDelete, "/admin/nodes/"+args[0]+"/tokens/"+args[1], nil, &out); err != nil {
				return fmt.Errorf("revoke token %s of node %s: %w", args[1], args[0], err)
			}
			fmt.Fprintf(c.OutOrStdout(), "token %s of node %s revoked at %s\n", out.ID, out.NodeID, when(out.RevokedAt))
			return nil
		},
	}
	flags(revoke, &rURL, &rToken)
	tok.AddCommand(revoke)

	var purpose, file string
	cred := &cobra.Command{
		Use:   "credential",
		Short: "Print a credential derived from a node's token (--purpose metrics: what a scraper of the node's /metrics presents)",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			t := os.Getenv("WARREN_NODE_TOKEN")
			if file != "" {
				b, err := os.ReadFile(file)
				if err != nil {
					return err
				}
				t = strings.TrimSpace(string(b))
			}
			if !nodeauth.ValidToken(t) {
				return fmt.Errorf("no node token: give --node-token-file or WARREN_NODE_TOKEN")
			}
			if purpose != nodeauth.PurposeMetrics {
				return fmt.Errorf("--purpose: only %q is printed (the others are the control plane's)", nodeauth.PurposeMetrics)
			}
			fmt.Fprintln(c.OutOrStdout(), nodeauth.Credential(t, purpose))
			return nil
		},
	}
	cred.Flags().StringVar(&purpose, "purpose", nodeauth.PurposeMetrics, "what the credential is for: metrics")
	cred.Flags().StringVar(&file, "node-token-file", "", "file holding the node's token (default env WARREN_NODE_TOKEN)")
	tok.AddCommand(cred)
	cmd.AddCommand(tok)
}

func when(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.Format(time.RFC3339)
}

// adminCall calls the admin API with body (JSON, when set) and decodes
// its answer into out.
func adminCall(c *cobra.Command, url, token, method, path string, body []byte, out any) error {
	if url == "" || token == "" {
		return fmt.Errorf("--url and --admin-token (or E2B_API_URL and WARREN_ADMIN_TOKEN) are required")
	}
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(c.Context(), method, strings.TrimRight(url, "/")+path, r)
	if err != nil {
		return err
	}
	req.Header.Set("X-Admin-Token", token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
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
