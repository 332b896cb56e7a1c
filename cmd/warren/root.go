package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/warren-sandbox/warren/internal/apiserver"
	"github.com/warren-sandbox/warren/internal/app/apirole"
	"github.com/warren-sandbox/warren/internal/app/serve"
	"github.com/warren-sandbox/warren/internal/store"
)

// run builds the command tree and executes it with args.
func run(ctx context.Context, args []string) error {
	root := newRoot(os.Stdout, os.Stderr)
	root.SetArgs(args)
	return root.ExecuteContext(ctx)
}

func newRoot(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:           "warren",
		Short:         "Warren: self-hosted sandboxes for AI agents, speaking the E2B protocol",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(sandboxCommand(stdout, stderr))
	root.AddCommand(newAPI(stdout, stderr))
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.AddCommand(newServe(stdout, stderr), newNode(stdout, stderr), newKeys(stdout), newTeam(stdout), templateCommand(), newDoctor(stdout), newBench(stdout, stderr))
	return root
}

// defaultPath returns name next to the running binary if it exists there.
func defaultPath(name string) string {
	exe, err := os.Executable()
	if err != nil {
		return name
	}
	p := filepath.Join(filepath.Dir(exe), name)
	if _, err := os.Stat(p); err == nil {
		return p
	}
	return name
}

func newServe(stdout, stderr io.Writer) *cobra.Command {
	var cfg serve.Config
	var proc processFlagSet
	var secretsKeyFile string
	var rebuildBase bool
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the API, the node agent and the edge proxy in one process",
		Long: `Run the E2B-compatible API, the node agent and the edge proxy in one process.
On start it prints the environment variables the E2B SDKs need.
One listener serves the API and sandbox traffic (routed by the E2b-Sandbox-Id
header or by <port>-<sandboxID>.<domain> hosts).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := controlPlaneSettings(cmd, &cfg.Settings, secretsKeyFile); err != nil {
				return err
			}
			opts, err := proc.options(stdout, stderr)
			if err != nil {
				return err
			}
			if err := prepareHost(&cfg.Host, rebuildBase); err != nil {
				return err
			}
			return serve.Run(cmd.Context(), opts, cfg)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Listen, "listen", "127.0.0.1:3000", "address of the API and sandbox traffic listener (HOST:PORT)")
	f.StringVar(&cfg.DatabaseURL, "database-url", "", "postgres:// URL of a Postgres database instead of SQLite (env WARREN_DATABASE_URL)")
	var denyPrivate bool
	f.BoolVar(&denyPrivate, "webhook-deny-private", true, "no effect: private webhook destinations are always refused unless allowed with --egress-allow")
	f.MarkDeprecated("webhook-deny-private", "private destinations are refused by default; allow exceptions with --egress-allow")
	cfg.DefaultPools = serve.PoolSizeAuto
	f.Func("pool-size", "ready sandboxes kept in the warm pool of base and of code-interpreter-v1 and mcp-gateway (when offered): auto (each from the host's CPUs and memory, at most 4) or 0 to 100; 0 turns them off (default auto)", func(v string) error {
		n, err := serve.ParsePoolSize(v)
		cfg.DefaultPools = n
		return err
	})
	controlPlaneFlags(f, &cfg.Settings, &secretsKeyFile)
	hostFlags(f, &cfg.Host, &rebuildBase)
	processFlags(f, &proc)
	return cmd
}

func newKeys(stdout io.Writer) *cobra.Command {
	var dataDir, dbURL, team, name string
	open := func(cmd *cobra.Command) (*store.SQL, error) {
		if dbURL == "" {
			dbURL = os.Getenv("WARREN_DATABASE_URL")
		}
		st, err := apirole.OpenStore(cmd.Context(), dataDir, dbURL, nil)
		if err != nil {
			return nil, err
		}
		return st, nil
	}
	cmd := &cobra.Command{Use: "keys", Short: "Manage API keys (works on the store directly; the server may be running)"}
	pf := cmd.PersistentFlags()
	pf.StringVar(&dataDir, "data-dir", filepath.Join("var", "data"), "data directory of warren serve")
	pf.StringVar(&dbURL, "database-url", "", "postgres:// URL instead of the SQLite database in --data-dir")
	pf.StringVar(&team, "team", apiserver.DefaultTeamID, "team ID")

	create := &cobra.Command{
		Use:   "create",
		Short: "Create a key and print it (it is shown only once)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			h, err := open(cmd)
			if err != nil {
				return err
			}
			defer h.Close()
			if team == apiserver.DefaultTeamID {
				if _, err := apiserver.EnsureDefaultTeam(cmd.Context(), h, ""); err != nil {
					return err
				}
			}
			key, k, err := apiserver.AddKey(cmd.Context(), h, team, name, "")
			if err != nil {
				return err
			}
			_, err = io.WriteString(stdout, "id: "+k.ID+"\nkey: "+key+"\n")
			return err
		},
	}
	create.Flags().StringVar(&name, "name", "", "a name for the key")
	list := &cobra.Command{
		Use:   "list",
		Short: "List keys (masked)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			h, err := open(cmd)
			if err != nil {
				return err
			}
			defer h.Close()
			keys, err := h.ListAPIKeys(cmd.Context(), team)
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
			io.WriteString(tw, "ID\tTEAM\tNAME\tKEY\tCREATED\n")
			for _, k := range keys {
				io.WriteString(tw, strings.Join([]string{k.ID, k.TeamID, k.Name, k.Mask, k.CreatedAt.Format("2006-01-02T15:04:05Z07:00")}, "\t")+"\n")
			}
			return tw.Flush()
		},
	}
	revoke := &cobra.Command{
		Use:   "revoke KEY_ID",
		Short: "Revoke a key",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			h, err := open(cmd)
			if err != nil {
				return err
			}
			defer h.Close()
			if err := h.DeleteAPIKey(cmd.Context(), args[0]); err != nil {
				return err
			}
			_, err = io.WriteString(stdout, "revoked "+args[0]+"\n")
			return err
		},
	}
	cmd.AddCommand(create, list, revoke)
	return cmd
}
