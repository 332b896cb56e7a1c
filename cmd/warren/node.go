package main

import (
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/warren-sandbox/warren/internal/app"
)

// newNode is `warren node`: one machine's node agent for the control plane
// of `warren api` (docs/node.md).
func newNode(stdout, stderr io.Writer) *cobra.Command {
	var cfg app.NodeConfig
	var logLevel string
	var rebuildBase bool
	cmd := &cobra.Command{
		Use:   "node",
		Short: "Run a node agent: sandboxes of this machine for the control plane (warren api)",
		Long: `Run the node agent of this machine, its node RPC server (--rpc-listen, which
the control plane calls) and its node proxy (--proxy-listen, through which
edge proxies reach the sandboxes' ports). Every request to either must carry
the node token (--node-token, env WARREN_NODE_TOKEN), which may be left out
only when both listen on loopback.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfg.NodeToken == "" {
				cfg.NodeToken = os.Getenv("WARREN_NODE_TOKEN")
			}
			if cfg.APIURL == "" {
				cfg.APIURL = os.Getenv("WARREN_API_URL")
			}
			if err := prepareHost(&cfg.Config, rebuildBase, logLevel, stdout, stderr); err != nil {
				return err
			}
			return app.RunNode(cmd.Context(), cfg)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.RPCListen, "rpc-listen", app.DefaultNodeRPCListen, "address of the node RPC server (HOST:PORT); also serves GET /metrics (with the token) and GET /healthz")
	f.StringVar(&cfg.ProxyListen, "proxy-listen", app.DefaultNodeProxyListen, "address of the node proxy that carries sandbox traffic from edge proxies (HOST:PORT)")
	f.StringVar(&cfg.NodeToken, "node-token", "", "token every RPC and proxy request must carry; required unless both listeners are on loopback (env WARREN_NODE_TOKEN)")
	f.StringVar(&cfg.NodeID, "node-id", "", "name of this node (default: the host name)")
	f.StringVar(&cfg.Advertise, "advertise", "", "host name or IP other machines reach this node at (default: the --rpc-listen host, or the host name when that is unspecified)")
	f.StringVar(&cfg.APIURL, "api-url", "", "URL of the control plane (warren api) to register with (env WARREN_API_URL)")
	f.Int64Var(&cfg.CapacityVCPUs, "capacity-vcpus", 0, fmt.Sprintf("sandbox vCPUs this node offers to placement (default %d per host CPU)", app.DefaultVCPUOvercommit))
	f.Int64Var(&cfg.CapacityMemoryMB, "capacity-memory-mb", 0, "sandbox memory in MiB this node offers to placement (default the host's memory)")
	hostFlags(f, &cfg.Config, &rebuildBase, &logLevel)
	addNodeAdminCommands(cmd)
	return cmd
}
