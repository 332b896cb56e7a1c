package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/warren-sandbox/warren/internal/apiserver"
	"github.com/warren-sandbox/warren/internal/builder"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/templates"
)

// templateCommand is `warren template build|list|delete`. Like `warren
// keys` it works on the data directory directly (a running `warren serve`
// sees the result); remote builds go through the E2B API
// (`Template.build()` in the SDK).
func templateCommand() *cobra.Command {
	var dataDir, team, baseTar string
	cmd := &cobra.Command{Use: "template", Short: "Build, list and delete templates (works on the data directory)"}
	pf := cmd.PersistentFlags()
	pf.StringVar(&dataDir, "data-dir", filepath.Join("var", "data"), "data directory of warren serve")
	pf.StringVar(&team, "team", apiserver.DefaultTeamID, "team ID")
	pf.StringVar(&baseTar, "base-rootfs", filepath.Join("var", "base-rootfs.tar"), "pre-built root filesystem tar of the base template")
	open := func(runner builder.Runner) (*builder.Local, error) {
		return builder.OpenLocal(builder.LocalConfig{DataDir: dataDir, BaseRootFSTar: baseTar, Runner: runner})
	}
	cmd.AddCommand(templateBuildCommand(open, &team), templateListCommand(open, &team), templateDeleteCommand(open, &team),
		templatePoolCommand(&team))
	return cmd
}

func templateBuildCommand(open func(builder.Runner) (*builder.Local, error), team *string) *cobra.Command {
	var file, name, startCmd, readyCmd, runner string
	var buildArgs []string
	var force bool
	var cpu int
	var memMB int64
	c := &cobra.Command{
		Use:   "build [-f Dockerfile] [--name NAME] [DIR]",
		Short: "Build a template from a Dockerfile (DIR is the build context, . by default)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := "."
			if len(args) == 1 {
				dir = args[0]
			}
			abs, err := filepath.Abs(dir)
			if err != nil {
				return err
			}
			if file == "" {
				file = filepath.Join(abs, "Dockerfile")
			}
			if name == "" {
				name = strings.ToLower(filepath.Base(abs))
			}
			bargs := map[string]string{}
			for _, a := range buildArgs {
				k, v, ok := strings.Cut(a, "=")
				if !ok {
					v, ok = os.LookupEnv(k)
				}
				if ok {
					bargs[k] = v
				}
			}
			f, err := os.Open(file)
			if err != nil {
				return err
			}
			spec, warnings, err := builder.ParseDockerfile(f, bargs)
			f.Close()
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			for _, w := range warnings {
				fmt.Fprintln(cmd.ErrOrStderr(), "warning: Dockerfile", w)
			}
			spec.ContextDir, spec.Force = abs, force
			if startCmd != "" {
				spec.StartCmd = startCmd
			}
			spec.ReadyCmd = readyCmd
			var r builder.Runner = builder.RuncRunner{}
			switch runner {
			case "runc":
			case "chroot":
				r = builder.ChrootRunner{}
			default:
				return fmt.Errorf("--runner %q: want runc or chroot: %w", runner, errdefs.ErrInvalid)
			}
			l, err := open(r)
			if err != nil {
				return err
			}
			defer l.Service.Close()
			ctx := cmd.Context()
			if spec.FromTemplate == templates.BaseID || strings.HasPrefix(spec.FromImage, "e2bdev/base") {
				if err := l.Catalog.EnsureBase(ctx, baseProgress(out)); err != nil {
					return err
				}
			}
			req := builder.StartRequest{TeamID: *team, Create: templates.CreateRequest{Name: name}, Spec: spec}
			if cmd.Flags().Changed("cpu") {
				req.Create.CPUCount = &cpu
			}
			if cmd.Flags().Changed("memory-mb") {
				req.Create.MemoryMB = &memMB
			}
			id, err := l.Service.StartBuild(ctx, req)
			if err != nil {
				return err
			}
			bd, err := streamBuild(ctx, out, l, *team, id, len(spec.Steps))
			if err != nil {
				return err
			}
			if bd.Status != templates.BuildReady {
				msg := "build failed"
				if bd.Reason != nil {
					msg = bd.Reason.Message
				}
				return errors.New(msg)
			}
			fmt.Fprintf(out, "template %s ready: id %s, build %s\n", name, bd.TemplateID, bd.ID)
			return nil
		},
	}
	fl := c.Flags()
	fl.StringVarP(&file, "file", "f", "", "Dockerfile (default DIR/Dockerfile)")
	fl.StringVar(&name, "name", "", "template name (alias[:tag]; default: the directory's name)")
	fl.StringArrayVar(&buildArgs, "build-arg", nil, "ARG value, KEY=VALUE (repeatable)")
	fl.BoolVar(&force, "force", false, "rebuild every step without the layer cache")
	fl.StringVar(&startCmd, "start-cmd", "", "start command (default: the Dockerfile's CMD/ENTRYPOINT)")
	fl.StringVar(&readyCmd, "ready-cmd", "", "ready command, retried every 2 s for up to 10 min")
	fl.StringVar(&runner, "runner", "runc", "where RUN steps execute: runc, or chroot (no isolation, trusted Dockerfiles only)")
	fl.IntVar(&cpu, "cpu", templates.DefaultCPU, "vCPUs of the template's sandboxes")
	fl.Int64Var(&memMB, "memory-mb", templates.DefaultMemoryMB, "memory of the template's sandboxes in MiB")
	return c
}

// baseProgress prints EnsureBase's progress, unpack progress once per
// tenth.
func baseProgress(out io.Writer) func(templates.Progress) {
	lastTenth := int64(-1)
	return func(p templates.Progress) {
		switch {
		case p.Phase == "unpack" && p.Total > 0:
			if t := p.Done * 10 / p.Total; t != lastTenth {
				lastTenth = t
				fmt.Fprintf(out, "base: unpacking %d%%\n", t*10)
			}
		case p.Message != "":
			fmt.Fprintf(out, "base: %s\n", p.Message)
		}
	}
}

// streamBuild prints a build's log entries as they come, with a step
// counter, until the build ends.
func streamBuild(ctx context.Context, out io.Writer, l *builder.Local, team, buildID string, steps int) (*templates.Build, error) {
	bd, err := l.Catalog.Build(ctx, buildID)
	if err != nil {
		return nil, err
	}
	offset := 0
	start := time.Now()
	for {
		st, err := l.Service.Status(ctx, team, bd.TemplateID, buildID, offset)
		if err != nil {
			return nil, err
		}
		for _, e := range st.LogEntries {
			prefix := "      "
			if e.Step != "" {
				prefix = fmt.Sprintf("[%s/%d]", e.Step, steps)
				if !strings.ContainsAny(e.Step[:1], "0123456789") {
					prefix = "[" + e.Step + "]"
				}
			}
			fmt.Fprintf(out, "%6.1fs %-10s %s\n", time.Since(start).Seconds(), prefix, e.Message)
		}
		offset += len(st.LogEntries)
		if (st.Status == templates.BuildReady || st.Status == templates.BuildError) && len(st.LogEntries) == 0 {
			return l.Catalog.Build(ctx, buildID)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func templateListCommand(open func(builder.Runner) (*builder.Local, error), team *string) *cobra.Command {
	var all bool
	c := &cobra.Command{
		Use:   "list",
		Short: "List the team's templates (and public ones with --all)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			l, err := open(nil)
			if err != nil {
				return err
			}
			defer l.Service.Close()
			ctx := cmd.Context()
			list, err := l.Catalog.List(ctx, "")
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			io.WriteString(tw, "ID\tNAMES\tTAGS\tPUBLIC\tCPU\tMEMORY\tLAST BUILD\tUPDATED\n")
			for _, t := range list {
				if t.TeamID != *team && !(all && (t.Public || t.TeamID == "")) {
					continue
				}
				tags := make([]string, 0, len(t.Tags))
				for tg := range t.Tags {
					tags = append(tags, tg)
				}
				slices.Sort(tags)
				last := "-"
				if builds, err := l.Catalog.Builds(ctx, t.ID); err == nil && len(builds) > 0 {
					last = string(builds[len(builds)-1].Status)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%v\t%d\t%d MiB\t%s\t%s\n", t.ID, strings.Join(t.Aliases, ","), strings.Join(tags, ","),
					t.Public, t.CPUCount, t.MemoryMB, last, t.UpdatedAt.UTC().Format(time.RFC3339))
			}
			return tw.Flush()
		},
	}
	c.Flags().BoolVar(&all, "all", false, "also list public and system templates (base)")
	return c
}

func templateDeleteCommand(open func(builder.Runner) (*builder.Local, error), team *string) *cobra.Command {
	return &cobra.Command{
		Use:   "delete NAME|ID...",
		Short: "Delete templates of the team with their builds",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			l, err := open(nil)
			if err != nil {
				return err
			}
			defer l.Service.Close()
			for _, a := range args {
				if err := l.Catalog.Delete(cmd.Context(), *team, a); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "deleted %s\n", a)
			}
			return nil
		},
	}
}
