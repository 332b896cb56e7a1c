package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/warren-sandbox/warren/internal/apiserver"
	"github.com/warren-sandbox/warren/internal/app/apirole"
	"github.com/warren-sandbox/warren/internal/store"
	"github.com/warren-sandbox/warren/internal/templates"
)

// limitFlags are the team limit flags of `team create` and `team limits`.
type limitFlags struct{ l store.Limits }

func (f *limitFlags) add(fs *pflag.FlagSet) {
	fs.IntVar(&f.l.MaxConcurrent, "max-concurrent", 0, "sandboxes running at once (0: the server default)")
	fs.IntVar(&f.l.MaxVCPUs, "max-vcpus", 0, "vCPUs of one sandbox")
	fs.Int64Var(&f.l.MaxMemoryMB, "max-memory-mb", 0, "memory of one sandbox in MiB")
	fs.Int64Var(&f.l.MaxDiskMB, "max-disk-mb", 0, "disk of one sandbox in MiB")
	fs.DurationVar(&f.l.MaxTimeout, "max-timeout", 0, "longest sandbox timeout")
	fs.IntVar(&f.l.MaxPaused, "max-paused", 0, "paused sandboxes kept")
	fs.IntVar(&f.l.MaxSnapshots, "max-snapshots", 0, "snapshots kept")
	fs.IntVar(&f.l.MaxBuilds, "max-builds", 0, "template builds running at once on a node")
	fs.IntVar(&f.l.MaxWebhooks, "max-webhooks", 0, "webhooks registered")
	fs.Int64Var(&f.l.MaxTemplateStorageMB, "max-template-storage-mb", 0, "disk in MiB the team's templates take (builds and their layer cache)")
	fs.IntVar(&f.l.MaxVolumes, "max-volumes", 0, "volumes kept")
	fs.Int64Var(&f.l.MaxVolumeSizeMB, "max-volume-size-mb", 0, "size in MiB of one volume (and of a volume created without one)")
	fs.Int64Var(&f.l.MaxVolumeStorageMB, "max-volume-storage-mb", 0, "sum in MiB of the sizes of the team's volumes")
}

// set copies the flags the user gave onto l.
func (f *limitFlags) set(fs *pflag.FlagSet, l *store.Limits) {
	for name, apply := range map[string]func(){
		"max-concurrent":          func() { l.MaxConcurrent = f.l.MaxConcurrent },
		"max-vcpus":               func() { l.MaxVCPUs = f.l.MaxVCPUs },
		"max-memory-mb":           func() { l.MaxMemoryMB = f.l.MaxMemoryMB },
		"max-disk-mb":             func() { l.MaxDiskMB = f.l.MaxDiskMB },
		"max-timeout":             func() { l.MaxTimeout = f.l.MaxTimeout },
		"max-paused":              func() { l.MaxPaused = f.l.MaxPaused },
		"max-snapshots":           func() { l.MaxSnapshots = f.l.MaxSnapshots },
		"max-builds":              func() { l.MaxBuilds = f.l.MaxBuilds },
		"max-webhooks":            func() { l.MaxWebhooks = f.l.MaxWebhooks },
		"max-template-storage-mb": func() { l.MaxTemplateStorageMB = f.l.MaxTemplateStorageMB },
		"max-volumes":             func() { l.MaxVolumes = f.l.MaxVolumes },
		"max-volume-size-mb":      func() { l.MaxVolumeSizeMB = f.l.MaxVolumeSizeMB },
		"max-volume-storage-mb":   func() { l.MaxVolumeStorageMB = f.l.MaxVolumeStorageMB },
	} {
		if fs.Changed(name) {
			apply()
		}
	}
}

func printLimits(w io.Writer, t *store.Team) error {
	l := t.Limits
	show := func(n int64) string {
		if n == 0 {
			return "default"
		}
		return fmt.Sprint(n)
	}
	timeout := "default"
	if l.MaxTimeout > 0 {
		timeout = l.MaxTimeout.String()
	}
	_, err := fmt.Fprintf(w, "team: %s\nname: %s\nmax-concurrent: %s\nmax-vcpus: %s\nmax-memory-mb: %s\nmax-disk-mb: %s\nmax-timeout: %s\nmax-paused: %s\nmax-snapshots: %s\nmax-builds: %s\nmax-webhooks: %s\nmax-template-storage-mb: %s\nmax-volumes: %s\nmax-volume-size-mb: %s\nmax-volume-storage-mb: %s\n",
		t.ID, t.Name, show(int64(l.MaxConcurrent)), show(int64(l.MaxVCPUs)), show(l.MaxMemoryMB), show(l.MaxDiskMB), timeout,
		show(int64(l.MaxPaused)), show(int64(l.MaxSnapshots)), show(int64(l.MaxBuilds)), show(int64(l.MaxWebhooks)), show(l.MaxTemplateStorageMB),
		show(int64(l.MaxVolumes)), show(l.MaxVolumeSizeMB), show(l.MaxVolumeStorageMB))
	return err
}

func newTeam(stdout io.Writer) *cobra.Command {
	var dataDir, dbURL, name string
	var lf limitFlags
	open := func(cmd *cobra.Command) (*store.SQL, error) {
		if dbURL == "" {
			dbURL = os.Getenv("WARREN_DATABASE_URL")
		}
		return apirole.OpenStore(cmd.Context(), dataDir, dbURL, nil)
	}
	cmd := &cobra.Command{Use: "team", Short: "Manage teams (works on the store directly; the server may be running)"}
	pf := cmd.PersistentFlags()
	pf.StringVar(&dataDir, "data-dir", filepath.Join("var", "data"), "data directory of warren serve")
	pf.StringVar(&dbURL, "database-url", "", "postgres:// URL instead of the SQLite database in --data-dir")

	create := &cobra.Command{
		Use:   "create TEAM_ID",
		Short: "Create a team and print its first API key (shown only once)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			h, err := open(cmd)
			if err != nil {
				return err
			}
			defer h.Close()
			t, key, err := apiserver.CreateTeam(cmd.Context(), h, args[0], name, lf.l)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(stdout, "team: %s\nkey: %s\n", t.ID, key)
			return err
		},
	}
	create.Flags().StringVar(&name, "name", "", "display name (default: the ID)")
	lf.add(create.Flags())

	list := &cobra.Command{
		Use:   "list",
		Short: "List teams",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			h, err := open(cmd)
			if err != nil {
				return err
			}
			defer h.Close()
			teams, err := h.ListTeams(cmd.Context())
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
			io.WriteString(tw, "ID\tNAME\tMAX CONCURRENT\tCREATED\n")
			for _, t := range teams {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", t.ID, t.Name, t.Limits.MaxConcurrent, t.CreatedAt.Format(time.RFC3339))
			}
			return tw.Flush()
		},
	}

	del := &cobra.Command{
		Use:   "delete TEAM_ID",
		Short: "Delete a team with its templates, keys and webhooks (refused while it has sandboxes)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if args[0] == apiserver.DefaultTeamID {
				return fmt.Errorf("the default team cannot be deleted")
			}
			h, err := open(cmd)
			if err != nil {
				return err
			}
			defer h.Close()
			cat, err := templates.New(templates.Config{DataDir: filepath.Join(dataDir, "templates")})
			if err != nil {
				return err
			}
			if err := apiserver.DeleteTeam(cmd.Context(), h, cat, args[0]); err != nil {
				return err
			}
			_, err = fmt.Fprintf(stdout, "deleted %s\n", args[0])
			return err
		},
	}

	var limits limitFlags
	lim := &cobra.Command{
		Use:   "limits TEAM_ID",
		Short: "Show a team's limits, changing those given as flags (0: the server default)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			h, err := open(cmd)
			if err != nil {
				return err
			}
			defer h.Close()
			t, err := h.UpdateTeam(cmd.Context(), args[0], func(t *store.Team) error {
				limits.set(cmd.Flags(), &t.Limits)
				return apiserver.ValidLimits(t.Limits)
			})
			if err != nil {
				return err
			}
			return printLimits(stdout, t)
		},
	}
	limits.add(lim.Flags())
	cmd.AddCommand(create, list, del, lim)
	return cmd
}
