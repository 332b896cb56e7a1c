package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/warren-sandbox/warren/internal/apiserver"
	"github.com/warren-sandbox/warren/internal/builder"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/pkg/client"
	"github.com/warren-sandbox/warren/pkg/client/buildcontext"
)

// defaultAPIURL is where `warren serve` listens unless told otherwise.
const defaultAPIURL = "http://127.0.0.1:3000"

// templateCommand is `warren template build|list|delete|pool`. Build, list
// and delete are clients of a running `warren serve` over E2B's template
// API (the one the SDK's Template.build() uses), so builds run where the
// server runs them (sandboxes of its runtime, with their own network);
// pool goes through the server's admin API.
func templateCommand() *cobra.Command {
	var team string
	cmd := &cobra.Command{Use: "template", Short: "Build, list and delete templates of a running warren serve"}
	pool := templatePoolCommand(&team)
	pool.PersistentFlags().StringVar(&team, "team", apiserver.DefaultTeamID, "team ID the admin API acts for")
	cmd.AddCommand(templateBuildCommand(), templateListCommand(), templateDeleteCommand(), pool)
	return cmd
}

// apiFlags are the server and key of the template commands.
type apiFlags struct{ url, key string }

func (a *apiFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&a.url, "api-url", "", "API URL of the running warren serve (env E2B_API_URL, else "+defaultAPIURL+")")
	fs.StringVar(&a.key, "api-key", "", "API key (env E2B_API_KEY; warren serve prints it)")
}

// client returns the API client: flags first, then the environment that
// `warren serve` tells users to export.
func (a *apiFlags) client() (*client.Client, error) {
	url, key := a.apiURL(), a.key
	if key == "" {
		key = os.Getenv("E2B_API_KEY")
	}
	if key == "" {
		return nil, fmt.Errorf("no API key: pass --api-key or export E2B_API_KEY (warren serve prints it): %w", errdefs.ErrInvalid)
	}
	return client.New(url, key), nil
}

// apiURL is the server's API URL: the flag, else E2B_API_URL, else the
// default.
func (a *apiFlags) apiURL() string {
	if a.url != "" {
		return a.url
	}
	if u := os.Getenv("E2B_API_URL"); u != "" {
		return u
	}
	return defaultAPIURL
}

// buildOptions are the flags of `warren template build`.
type buildOptions struct {
	api       apiFlags
	file      string
	name      string
	startCmd  string
	readyCmd  string
	buildArgs []string
	force     bool
	cpu       int
	memMB     int64
}

func templateBuildCommand() *cobra.Command {
	var o buildOptions
	c := &cobra.Command{
		Use:   "build [-f Dockerfile] [--name NAME] [DIR]",
		Short: "Build a template from a Dockerfile on the running warren serve (DIR is the build context, . by default)",
		Long: `Build a template from a Dockerfile on a running warren serve, through E2B's
template build API: the Dockerfile is read here (FROM, RUN, COPY/ADD, ENV,
ARG, WORKDIR, USER, CMD/ENTRYPOINT; anything else is refused by name), the
files of each COPY are uploaded (read from DIR only: a symlink is copied as
a link, and a source through a symlink out of DIR is refused), and the
server runs the build in its own sandboxes while this command prints the
steps and their output.

Variables in ENV, ARG defaults, WORKDIR, USER and COPY/ADD destinations are
expanded by the server when the step runs, from the build's environment
(the base image's ENV included: ENV PATH=/opt/bin:$PATH works); COPY/ADD
sources are expanded here, from the Dockerfile's ARG and ENV values, since
their files are read here. --build-arg values are taken literally.

FROM names a template of the server when it is a plain name the server knows
(base, myapp, myapp:v2); otherwise an image of an OCI registry, pulled by the
server (e2bdev/base is the server's base template).`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := "."
			if len(args) == 1 {
				dir = args[0]
			}
			return runTemplateBuild(cmd, o, dir)
		},
	}
	fl := c.Flags()
	o.api.register(fl)
	fl.StringVarP(&o.file, "file", "f", "", "Dockerfile (default DIR/Dockerfile)")
	fl.StringVar(&o.name, "name", "", "template name, alias[:tag] (default: the directory's name)")
	fl.StringArrayVar(&o.buildArgs, "build-arg", nil, "ARG value, KEY=VALUE, or KEY to take it from the environment (repeatable)")
	fl.BoolVar(&o.force, "force", false, "rebuild every step without the layer cache")
	fl.BoolVar(&o.force, "no-cache", false, "same as --force")
	fl.StringVar(&o.startCmd, "start-cmd", "", "start command (default: the Dockerfile's CMD/ENTRYPOINT)")
	fl.StringVar(&o.readyCmd, "ready-cmd", "", "ready command, retried every 2 s for up to 10 min")
	fl.IntVar(&o.cpu, "cpu", 0, "vCPUs of the template's sandboxes (default: the server's)")
	fl.Int64Var(&o.memMB, "memory-mb", 0, "memory of the template's sandboxes in MiB (default: the server's)")
	return c
}

func runTemplateBuild(cmd *cobra.Command, o buildOptions, dir string) error {
	ctx := cmd.Context()
	out := cmd.OutOrStdout()
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	if fi, err := os.Stat(abs); err != nil || !fi.IsDir() {
		return fmt.Errorf("build context %s: not a directory: %w", dir, errdefs.ErrInvalid)
	}
	file := o.file
	if file == "" {
		file = filepath.Join(abs, "Dockerfile")
	}
	name := o.name
	if name == "" {
		name = strings.ToLower(filepath.Base(abs))
	}
	bargs := map[string]string{}
	for _, a := range o.buildArgs {
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
	for _, w := range warnings {
		fmt.Fprintln(cmd.ErrOrStderr(), "warning: Dockerfile", w)
	}
	if o.startCmd != "" {
		spec.StartCmd = o.startCmd
	}
	steps, srcs, err := apiSteps(spec)
	if err != nil {
		return err
	}
	bc, err := buildcontext.Open(abs)
	if err != nil {
		return err
	}
	defer bc.Close()
	// Every COPY source is read before the server is asked for anything:
	// a missing file leaves no waiting build behind.
	uploads, err := bc.Prepare(steps, srcs)
	if err != nil {
		return err
	}
	c, err := o.api.client()
	if err != nil {
		return err
	}
	fromImage, fromTemplate, err := baseOf(ctx, spec.FromImage, c.TemplateByAlias)
	if err != nil {
		return err
	}
	req := client.NewTemplate{Name: name}
	if cmd.Flags().Changed("cpu") {
		req.CPUCount = &o.cpu
	}
	if cmd.Flags().Changed("memory-mb") {
		req.MemoryMB = &o.memMB
	}
	created, err := c.CreateTemplate(ctx, req)
	if err != nil {
		return err
	}
	start := time.Now()
	logf := func(format string, args ...any) {
		fmt.Fprintf(out, "%6.1fs %-10s %s\n", time.Since(start).Seconds(), "", fmt.Sprintf(format, args...))
	}
	base := "FROM template " + fromTemplate
	if fromImage != "" {
		base = "FROM image " + fromImage
	}
	logf("template %s (id %s), build %s: %s, %d steps", name, created.TemplateID, created.BuildID, base, len(steps))
	if err := uploads.Upload(ctx, c, created.TemplateID, logf); err != nil {
		return err
	}
	err = c.StartTemplateBuild(ctx, created.TemplateID, created.BuildID, client.TemplateBuild{
		FromImage: fromImage, FromTemplate: fromTemplate, Force: o.force, Steps: steps,
		StartCmd: spec.StartCmd, ReadyCmd: o.readyCmd,
	})
	if err != nil {
		return err
	}
	_, err = c.WaitTemplateBuild(ctx, created.TemplateID, created.BuildID, 0, func(e client.BuildLogEntry) {
		printLogEntry(out, start, e, len(steps))
	})
	var fe *client.BuildFailedError
	switch {
	case errors.Is(err, context.Canceled):
		return fmt.Errorf("stopped following build %s of template %s; it goes on in the server: %w", created.BuildID, name, err)
	case errors.As(err, &fe):
		return fmt.Errorf("template %s: build %s failed: %s", name, created.BuildID, fe.Error())
	case err != nil:
		return err
	}
	fmt.Fprintf(out, "template %s ready: id %s, build %s\n", name, created.TemplateID, created.BuildID)
	return nil
}

// printLogEntry prints one build log line: time since start, the step
// as n/N (or the phase), the message.
func printLogEntry(out io.Writer, start time.Time, e client.BuildLogEntry, steps int) {
	prefix := ""
	switch {
	case e.Step == "":
	case e.Step[0] >= '0' && e.Step[0] <= '9':
		prefix = fmt.Sprintf("[%s/%d]", e.Step, steps)
	default:
		prefix = "[" + e.Step + "]"
	}
	// The server starts a step's first line with "[n] ": the prefix says it.
	msg := strings.TrimPrefix(e.Message, "["+e.Step+"] ")
	for _, line := range strings.Split(strings.TrimRight(msg, "\n"), "\n") {
		fmt.Fprintf(out, "%6.1fs %-10s %s\n", time.Since(start).Seconds(), prefix, line)
	}
}

func templateListCommand() *cobra.Command {
	var api apiFlags
	c := &cobra.Command{
		Use:   "list",
		Short: "List the team's templates on the running warren serve",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := api.client()
			if err != nil {
				return err
			}
			list, err := c.Templates(cmd.Context())
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			io.WriteString(tw, "ID\tNAMES\tPUBLIC\tCPU\tMEMORY\tBUILDS\tLAST BUILD\tUPDATED\n")
			for _, t := range list {
				names := strings.Join(t.Aliases, ",")
				if names == "" {
					names = "-"
				}
				fmt.Fprintf(tw, "%s\t%s\t%v\t%d\t%d MiB\t%d\t%s\t%s\n", t.TemplateID, names, t.Public, t.CPUCount, t.MemoryMB,
					t.BuildCount, t.BuildStatus, t.UpdatedAt.UTC().Format(time.RFC3339))
			}
			return tw.Flush()
		},
	}
	api.register(c.Flags())
	return c
}

func templateDeleteCommand() *cobra.Command {
	var api apiFlags
	c := &cobra.Command{
		Use:   "delete NAME|ID...",
		Short: "Delete templates of the team, with their builds, on the running warren serve",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := api.client()
			if err != nil {
				return err
			}
			for _, a := range args {
				ok, err := c.DeleteTemplate(cmd.Context(), a)
				if err != nil {
					return err
				}
				if !ok {
					return fmt.Errorf("template %q: %w", a, errdefs.ErrNotFound)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "deleted %s\n", a)
			}
			return nil
		},
	}
	api.register(c.Flags())
	return c
}
