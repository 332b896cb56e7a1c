package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/warren-sandbox/warren/internal/app/noderole"
	"github.com/warren-sandbox/warren/internal/app/serve"
	"github.com/warren-sandbox/warren/internal/doctor"
)

// defaultMemberMiB is the memory of a create with default resources (the
// API's default), which the base pool's members get.
const defaultMemberMiB = 512

// warmPoolResult says the warm pools `warren serve --pool-size auto`
// keeps on this host: base's, and code-interpreter-v1's and mcp-gateway's
// when they are offered.
func warmPoolResult() doctor.Result {
	size, why, err := serve.HostPoolSize(defaultMemberMiB)
	if err != nil {
		return doctor.Result{Name: "warm pool", Status: doctor.Warn, Detail: fmt.Sprintf("serve --pool-size auto keeps no base pool: %v", err),
			Fix: "give warren serve --pool-size N"}
	}
	ci, _, _ := serve.HostPoolSize(noderole.CodeInterpreterMemoryMB)
	gw, _, _ := serve.HostPoolSize(noderole.MCPGatewayMemoryMB)
	return doctor.Result{Name: "warm pool", Status: doctor.OK,
		Detail: fmt.Sprintf("serve --pool-size auto keeps %d ready base sandboxes (%s), %d of %s and %d of %s when they are offered (--pool-size N sets each, 0 turns them off)",
			size, why, ci, noderole.CodeInterpreterID, gw, noderole.MCPGatewayID)}
}

// errDoctorFailed makes `warren doctor` exit non-zero without printing a
// second message: the failed checks are already on stdout.
type errDoctorFailed struct{}

func (errDoctorFailed) Error() string { return "some host checks failed" }

func newDoctor(stdout io.Writer) *cobra.Command {
	var cfg doctor.Config
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check that this host can run sandboxes, and say how to fix what is missing",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			results := append(doctor.Run(cmd.Context(), cfg), warmPoolResult())
			if asJSON {
				enc := json.NewEncoder(stdout)
				enc.SetIndent("", "  ")
				if err := enc.Encode(results); err != nil {
					return err
				}
			} else {
				for _, r := range results {
					fmt.Fprintln(stdout, r.String())
				}
			}
			if doctor.Failed(results) {
				return errDoctorFailed{}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Driver, "driver", "runsc", "runtime driver to check for: runsc or runc")
	f.StringVar(&cfg.RunscPath, "runsc", defaultPath("runsc"), "runsc binary")
	f.StringVar(&cfg.RuncPath, "runc", "runc", "runc binary")
	f.StringVar(&cfg.EnvdPath, "envd", defaultPath("envd"), "envd binary")
	f.StringVar(&cfg.DataDir, "data-dir", "var/data", "data directory whose disk space is checked")
	f.BoolVar(&asJSON, "json", false, "print the results as JSON")
	return cmd
}
