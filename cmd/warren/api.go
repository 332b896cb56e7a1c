package main

import (
	"io"
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/warren-sandbox/warren/internal/app/apirole"
	"github.com/warren-sandbox/warren/internal/store"
)

// controlPlaneFlags defines the flags of the control plane's settings,
// which warren serve and warren api share: what the REST API, the edge
// proxy and event delivery take (--listen and --database-url are each
// command's own), and the file of the secrets key (secretsKeyFlag).
func controlPlaneFlags(f *pflag.FlagSet, s *apirole.Settings, secretsKeyFile *string) {
	f.StringVar(&s.APIKey, "api-key", "", "API key (e2b_ + 40 hex) to accept for the default team (env WARREN_API_KEY)")
	f.StringVar(&s.AdminToken, "admin-token", "", "token for the admin endpoints, sent as X-Admin-Token, at least 32 characters (env WARREN_ADMIN_TOKEN; none: admin API off)")
	f.StringArrayVar(&s.TrustedProxies, "trusted-proxy", nil, "a reverse proxy in front of the listener (CIDR or IP, repeatable): for its requests the client whose failed authentications are throttled is the one its X-Forwarded-For names")
	f.StringVar(&s.MetricsListen, "metrics-listen", apirole.DefaultMetricsListen, "address serving Prometheus GET /metrics without a token (empty disables; the API's /metrics still needs the admin token)")
	f.StringVar(&s.Domain, "domain", "", "sandbox domain for <port>-<sandboxID>.<domain> hosts (default localhost:<port>)")
	f.StringVar(&s.PublicURL, "public-url", "", "absolute URL clients reach the API at, for the upload URLs of template builds (default: each request's scheme and Host)")
	f.StringVar(&s.TLSCert, "tls-cert", "", "TLS certificate file (serve HTTPS with HTTP/2)")
	f.StringVar(&s.TLSKey, "tls-key", "", "TLS key file")
	f.DurationVar(&s.Events.Retention, "event-retention", 0, "how long lifecycle events, webhook deliveries and records of killed sandboxes are kept (default 720h)")
	f.IntVar(&s.Events.WebhookMaxAttempts, "webhook-max-attempts", 0, "attempts per webhook delivery before it is marked failed (default 10)")
	f.DurationVar(&s.Events.WebhookBackoff, "webhook-backoff", 0, "delay before the first webhook retry, doubling after each (default 5s)")
	f.IntVar(&s.Events.WebhookTeamConcurrency, "webhook-team-concurrency", 0, "webhook delivery attempts of one team in flight at once, of the 8 of the server (default 2)")
	teamLimitFlags(f, &s.Limits)
	secretsKeyFlag(f, secretsKeyFile)
}

// teamLimitFlags are the defaults of the team limits (docs/configuration.md):
// a team's own non-zero limits win. The disk, build, webhook and volume
// ones keep one team from taking what others are owed.
func teamLimitFlags(f *pflag.FlagSet, l *store.Limits) {
	f.IntVar(&l.MaxConcurrent, "max-concurrent", 0, "default limit of a team's running sandboxes (default 20; a team's own limit wins)")
	f.DurationVar(&l.MaxTimeout, "max-timeout", 0, "default longest sandbox timeout a team may ask for (default 24h)")
	f.IntVar(&l.MaxVCPUs, "max-vcpus", 0, "default bound of a team's sandbox vCPUs (default 8)")
	f.Int64Var(&l.MaxMemoryMB, "max-memory-mb", 0, "default bound of a team's sandbox memory in MiB (default 8192)")
	f.Int64Var(&l.MaxDiskMB, "max-disk-mb", 0, "default bound of a team's sandbox disk (and template disk) in MiB (default 20480)")
	f.IntVar(&l.MaxBuilds, "max-builds", 0, "default number of a team's template builds running at once on a node (default: half the node's --build-slots, at least 1)")
	f.IntVar(&l.MaxWebhooks, "max-webhooks", 0, "default number of webhooks a team may register (default 20)")
	f.Int64Var(&l.MaxTemplateStorageMB, "max-template-storage-mb", 0, "default bound in MiB of the disk a team's templates take: build trees, snapshots and the layer cache their builds made (default 102400)")
	f.IntVar(&l.MaxVolumes, "max-volumes", 0, "default number of volumes a team may keep (default 20)")
	f.Int64Var(&l.MaxVolumeSizeMB, "max-volume-size-mb", 0, "default bound in MiB of one volume of a team, and the size of a volume created without one (default 10240)")
	f.Int64Var(&l.MaxVolumeStorageMB, "max-volume-storage-mb", 0, "default bound in MiB of the sum of the sizes of a team's volumes (default 51200)")
}

// controlPlaneSettings completes s after the flags are parsed: the
// settings left empty from the environment, whether the metrics address
// is the default (a taken default is a warning only), and the secrets key
// (loadSecretsKey).
func controlPlaneSettings(cmd *cobra.Command, s *apirole.Settings, secretsKeyFile string) error {
	fromEnv(map[*string]string{&s.APIKey: "WARREN_API_KEY", &s.AdminToken: "WARREN_ADMIN_TOKEN", &s.DatabaseURL: "WARREN_DATABASE_URL"})
	s.MetricsListenBestEffort = !cmd.Flags().Changed("metrics-listen")
	key, err := loadSecretsKey(secretsKeyFile)
	s.SecretsKey = key
	return err
}

// fromEnv sets each empty string to its environment variable.
func fromEnv(vars map[*string]string) {
	for p, env := range vars {
		if *p == "" {
			*p = os.Getenv(env)
		}
	}
}

func newAPI(stdout, stderr io.Writer) *cobra.Command {
	var cfg apirole.Config
	var proc processFlagSet
	var secretsKeyFile string
	cmd := &cobra.Command{
		Use:   "api",
		Short: "Run the API and the edge proxy over registered nodes (no local node; Postgres)",
		Long: `Run the E2B-compatible API, the edge proxy and the lifecycle over the nodes
that register with it (warren node), with no node of its own. Several may share
one Postgres database. Each node registers and heartbeats with its own token
(warren node token create ID), made with --node-credential-key; the API calls
the nodes over TLS (--node-ca verifies them), or plain HTTP on loopback.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts, err := proc.options(stdout, stderr)
			if err != nil {
				return err
			}
			if err := controlPlaneSettings(cmd, &cfg.Settings, secretsKeyFile); err != nil {
				return err
			}
			fromEnv(map[*string]string{&cfg.NodeCredentialKey: "WARREN_NODE_CREDENTIAL_KEY", &cfg.NodeCA: "WARREN_NODE_CA"})
			return apirole.Run(cmd.Context(), opts, cfg)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Listen, "listen", "127.0.0.1:3000", "address of the API, node registration and sandbox traffic listener (HOST:PORT)")
	f.StringVar(&cfg.DatabaseURL, "database-url", "", "postgres:// URL of the database the API replicas share (required; env WARREN_DATABASE_URL)")
	f.StringVar(&cfg.NodeCredentialKey, "node-credential-key", "", "key the nodes' own tokens are made and checked with, the same on every replica, 32 characters or more (required; env WARREN_NODE_CREDENTIAL_KEY)")
	f.StringVar(&cfg.NodeCA, "node-ca", "", "PEM file of the CA certificates the nodes' TLS certificates are checked against (default the system's roots; env WARREN_NODE_CA)")
	f.BoolVar(&cfg.InsecureLoopbackNodes, "insecure-loopback-nodes", false, "let nodes register without a token, from loopback only, and call them without credentials (one-host tests; not with --node-credential-key)")
	f.DurationVar(&cfg.Liveness.UnreachableAfter, "node-unreachable-after", 0, "a node silent this long gets no new sandboxes (default 15s)")
	f.DurationVar(&cfg.Liveness.LostAfter, "node-lost-after", 0, "a node silent this long is lost: its running sandboxes are killed with node_lost (default 5m)")
	f.DurationVar(&cfg.Liveness.PausedLostAfter, "node-paused-lost-after", 0, "a node silent this long loses its paused sandboxes too (default 1h)")
	controlPlaneFlags(f, &cfg.Settings, &secretsKeyFile)
	processFlags(f, &proc)
	return cmd
}
