package e2b

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/warren-sandbox/warren/pkg/client"
	"github.com/warren-sandbox/warren/pkg/client/buildcontext"
)

// TemplateStep is one build step (see client.TemplateStep for the
// argument layout); StepRun, StepCopy, StepEnv, StepWorkdir and StepUser
// make the common ones.
type TemplateStep = client.TemplateStep

// BuildLogEntry is one line of a build's log.
type BuildLogEntry = client.BuildLogEntry

// TemplateBuildInfo is how a build ended.
type TemplateBuildInfo = client.TemplateBuildInfo

// StepRun is a RUN step (as user when given).
func StepRun(cmd string, user ...string) TemplateStep {
	return TemplateStep{Type: "RUN", Args: append([]string{cmd}, user...)}
}

// StepCopy is a COPY step of src (a path or glob relative to the build
// context, TemplateOptions.ContextDir) to dest in the template; user
// owns the copied files and mode (octal, e.g. "0755") sets their
// permissions when given. BuildTemplate uploads the files.
func StepCopy(src, dest string, userMode ...string) TemplateStep {
	args := []string{src, dest, "", ""}
	copy(args[2:], userMode)
	return TemplateStep{Type: "COPY", Args: args}
}

// StepEnv is an ENV step of key, value pairs.
func StepEnv(kv ...string) TemplateStep { return TemplateStep{Type: "ENV", Args: kv} }

// StepWorkdir is a WORKDIR step.
func StepWorkdir(dir string) TemplateStep { return TemplateStep{Type: "WORKDIR", Args: []string{dir}} }

// StepUser is a USER step.
func StepUser(name string) TemplateStep { return TemplateStep{Type: "USER", Args: []string{name}} }

// TemplateOptions describe a template build.
type TemplateOptions struct {
	Config
	// Name is "alias" or "alias:tag"; an existing name gets a new build.
	Name string
	// CPUCount and MemoryMB size the template's sandboxes (server
	// defaults when zero).
	CPUCount int
	MemoryMB int64
	// FromImage (an OCI image reference) or FromTemplate (an alias or ID)
	// is the base; neither means the base template.
	FromImage, FromTemplate string
	// Steps run in order.
	Steps []TemplateStep
	// ContextDir is the build context of the COPY and ADD steps (the
	// current directory when empty): their files are read from it, never
	// from outside it (see pkg/client/buildcontext), and uploaded unless
	// the server has them already.
	ContextDir string
	// StartCmd runs when a sandbox starts; ReadyCmd says when it is ready.
	StartCmd, ReadyCmd string
	// OnLog is called with each log line as the build goes.
	OnLog func(BuildLogEntry)
	// PollInterval is how often the build status is asked for (1 s when zero).
	PollInterval time.Duration
}

// BuildTemplate builds a template and waits for the build to end; a
// failed build returns a *client.BuildFailedError. ctx bounds the whole
// build (the request timeout bounds each call).
func BuildTemplate(ctx context.Context, o TemplateOptions) (*TemplateBuildInfo, error) {
	cfg, err := o.Config.resolve()
	if err != nil {
		return nil, err
	}
	api := cfg.api()
	steps := slices.Clone(o.Steps)
	if steps == nil {
		steps = []TemplateStep{}
	}
	// The COPY sources are read before the server is asked for anything:
	// a missing file leaves no waiting build behind.
	var uploads *buildcontext.Uploads
	if slices.ContainsFunc(steps, func(s TemplateStep) bool { return s.Type == "COPY" || s.Type == "ADD" }) {
		bc, err := buildcontext.Open(cmp.Or(o.ContextDir, "."))
		if err != nil {
			return nil, fmt.Errorf("template %s: %w", o.Name, err)
		}
		defer bc.Close()
		if uploads, err = bc.Prepare(steps, nil); err != nil {
			return nil, fmt.Errorf("template %s: %w", o.Name, err)
		}
	}
	nt := client.NewTemplate{Name: o.Name}
	if o.CPUCount > 0 {
		nt.CPUCount = &o.CPUCount
	}
	if o.MemoryMB > 0 {
		nt.MemoryMB = &o.MemoryMB
	}
	rctx, cancel := cfg.withTimeout(ctx)
	created, err := api.CreateTemplate(rctx, nt)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("create template %s: %w", o.Name, err)
	}
	if uploads != nil {
		// Not bounded by the request timeout: a large context takes long.
		if err := uploads.Upload(ctx, api, created.TemplateID, nil); err != nil {
			return nil, fmt.Errorf("upload the files of template %s: %w", o.Name, err)
		}
	}
	rctx, cancel = cfg.withTimeout(ctx)
	err = api.StartTemplateBuild(rctx, created.TemplateID, created.BuildID, client.TemplateBuild{
		FromImage: o.FromImage, FromTemplate: o.FromTemplate, Steps: steps, StartCmd: o.StartCmd, ReadyCmd: o.ReadyCmd})
	cancel()
	if err != nil {
		return nil, fmt.Errorf("start build of template %s: %w", o.Name, err)
	}
	interval := o.PollInterval
	if interval <= 0 {
		interval = time.Second
	}
	info, err := api.WaitTemplateBuild(ctx, created.TemplateID, created.BuildID, interval, o.OnLog)
	if err != nil {
		return info, fmt.Errorf("build template %s: %w", o.Name, err)
	}
	return info, nil
}
