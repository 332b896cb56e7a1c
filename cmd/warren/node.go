package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/warren-sandbox/warren/internal/app/noderole"
)

// newNode is `warren node`: one machine's node agent for the control plane
// of `warren api` (docs/node.md).
func newNode(stdout, stderr io.Writer) *cobra.Command {
	var cfg noderole.Config
	var proc processFlagSet
	var tokenFile string
	var rebuildBase bool
	cmd := &cobra.Command{
		Use:   "node",
		Short: "Run a node agent: sandboxes of this machine for the control plane (warren api)",
		Long: `Run the node agent of this machine, its node RPC server (--rpc-listen, which
the control plane calls) and its node proxy (--proxy-listen, through which
edge proxies reach the sandboxes' ports). The node has its own token
(--node-token, env WARREN_NODE_TOKEN, or --node-token-file), issued by the
operator with "warren node token create ID"; every request to either listener
must carry the credential derived from it, which only the control plane has.
Both listeners serve TLS (--tls-cert, --tls-key) unless both are on loopback;
a node on loopback runs without a token only with --insecure-loopback.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fromEnv(map[*string]string{&cfg.NodeToken: "WARREN_NODE_TOKEN", &tokenFile: "WARREN_NODE_TOKEN_FILE"})
			if tokenFile != "" {
				if cfg.NodeToken != "" {
					return fmt.Errorf("give --node-token or --node-token-file, not both")
				}
				b, err := os.ReadFile(tokenFile)
				if err != nil {
					return fmt.Errorf("node token file: %w", err)
				}
				cfg.NodeToken = strings.TrimSpace(string(b))
			}
			fromEnv(map[*string]string{&cfg.APIURL: "WARREN_API_URL"})
			opts, err := proc.options(stdout, stderr)
			if err != nil {
				return err
			}
			if err := prepareHost(&cfg.Host, rebuildBase); err != nil {
				return err
			}
			return noderole.Run(cmd.Context(), opts, cfg)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.RPCListen, "rpc-listen", noderole.DefaultRPCListen, "address of the node RPC server (HOST:PORT); also serves GET /metrics (with the metrics credential) and GET /healthz")
	f.StringVar(&cfg.ProxyListen, "proxy-listen", noderole.DefaultProxyListen, "address of the node proxy that carries sandbox traffic from edge proxies (HOST:PORT)")
	f.StringVar(&cfg.NodeToken, "node-token", "", "this node's own token, from `warren node token create` (env WARREN_NODE_TOKEN)")
	f.StringVar(&tokenFile, "node-token-file", "", "file holding this node's token, e.g. a mounted Secret (env WARREN_NODE_TOKEN_FILE)")
	f.BoolVar(&cfg.InsecureLoopback, "insecure-loopback", false, "run without a token, both listeners on loopback, taking every call (one-host tests)")
	f.StringVar(&cfg.TLSCert, "tls-cert", "", "TLS certificate (PEM, with its chain) of the RPC and proxy listeners, re-read when it changes; required unless both are on loopback")
	f.StringVar(&cfg.TLSKey, "tls-key", "", "TLS key of the RPC and proxy listeners")
	f.StringVar(&cfg.NodeCA, "node-ca", "", "PEM file of the CA certificates other nodes' TLS certificates are checked against, for build pulls (default the system's roots)")
	f.StringVar(&cfg.APICA, "api-ca", "", "PEM file of the CA certificates the control plane's TLS certificate is checked against (default the system's roots)")
	f.StringVar(&cfg.NodeID, "node-id", "", "name of this node (default: the host name)")
	f.StringVar(&cfg.Advertise, "advertise", "", "host name or IP other machines reach this node at (default: the --rpc-listen host, or the host name when that is unspecified)")
	f.StringVar(&cfg.APIURL, "api-url", "", "URL of the control plane (warren api) to register with (env WARREN_API_URL)")
	f.Int64Var(&cfg.CapacityVCPUs, "capacity-vcpus", 0, fmt.Sprintf("sandbox vCPUs this node offers to placement (default %d per host CPU)", noderole.DefaultVCPUOvercommit))
	f.Int64Var(&cfg.CapacityMemoryMB, "capacity-memory-mb", 0, "sandbox memory in MiB this node offers to placement (default the host's memory)")
	hostFlags(f, &cfg.Host, &rebuildBase)
	processFlags(f, &proc)
	addNodeAdminCommands(cmd)
	addNodeTokenCommands(cmd)
	return cmd
}
