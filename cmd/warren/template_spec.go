package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/moby/buildkit/frontend/dockerfile/shell"

	"github.com/warren-sandbox/warren/internal/builder"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/pkg/client"
)

// The translation of a parsed Dockerfile (builder.Spec) into the steps of
// E2B's build API, the inverse of what the API server does with them.
//
// The API takes arguments as written, while ParseDockerfile leaves the
// variables of ENV, ARG defaults, COPY/ADD, WORKDIR and USER to be expanded
// when the step runs. So they are expanded here, in order, from the ARG and
// ENV values the Dockerfile sets (ENV over ARG, as Docker does). A
// reference to a variable the Dockerfile does not set — one of the base
// image, such as $PATH — cannot be expanded on this side and is refused with
// a message that says so. RUN commands stay as written: their shell expands
// them in the build sandbox, where ARG and ENV values are in the
// environment.

// apiSteps returns the API steps of spec. The COPY and ADD steps still
// lack their FilesHash (uploadContexts sets it).
func apiSteps(spec builder.Spec) ([]client.TemplateStep, error) {
	args, env := map[string]string{}, map[string]string{}
	out := make([]client.TemplateStep, 0, len(spec.Steps))
	for i, s := range spec.Steps {
		st := client.TemplateStep{Type: s.Type, Args: slices.Clone(s.Args), Force: s.Force}
		if s.Expand {
			vars := maps.Clone(args)
			maps.Copy(vars, env)
			var err error
			if st.Args, err = expandArgs(s.Type, st.Args, vars); err != nil {
				return nil, fmt.Errorf("Dockerfile step %d (%s): %w", i+1, describeStep(s), err)
			}
		}
		switch s.Type {
		case builder.StepEnv:
			for j := 0; j+1 < len(st.Args); j += 2 {
				env[st.Args[j]] = st.Args[j+1]
			}
		case builder.StepArg:
			if _, set := args[st.Args[0]]; !set || len(st.Args) > 1 {
				v := ""
				if len(st.Args) > 1 {
					v = st.Args[1]
				}
				args[st.Args[0]] = v
			}
		}
		out = append(out, st)
	}
	return out, nil
}

func describeStep(s builder.Step) string {
	return strings.TrimSpace(s.Type + " " + strings.Join(s.Args, " "))
}

// expandArgs expands the arguments of a step that the Dockerfile rules
// expand: ENV values, an ARG's default, COPY/ADD source, destination and
// owner, WORKDIR and USER.
func expandArgs(typ string, a []string, vars map[string]string) ([]string, error) {
	var idx []int
	switch typ {
	case builder.StepEnv:
		for i := 1; i < len(a); i += 2 {
			idx = append(idx, i)
		}
	case builder.StepArg:
		idx = []int{1}
	case builder.StepCopy, builder.StepAdd:
		idx = []int{0, 1, 2}
	case builder.StepWorkdir, builder.StepUser:
		idx = []int{0}
	}
	lex := shell.NewLex('\\')
	for _, i := range idx {
		if i >= len(a) {
			continue
		}
		res, err := lex.ProcessWordWithMatches(a[i], envGetter(vars))
		if err != nil {
			return nil, fmt.Errorf("%v: %w", err, errdefs.ErrInvalid)
		}
		if len(res.Unmatched) > 0 {
			names := slices.Sorted(maps.Keys(res.Unmatched))
			return nil, fmt.Errorf("$%s is not set by an ARG or ENV of the Dockerfile; variables of the base image cannot be expanded through the build API, so write the value out: %w",
				strings.Join(names, ", $"), errdefs.ErrUnsupported)
		}
		a[i] = res.Result
	}
	return a, nil
}

// envGetter serves shell.Lex from a map.
type envGetter map[string]string

func (e envGetter) Get(k string) (string, bool) { v, ok := e[k]; return v, ok }

func (e envGetter) Keys() []string { return slices.Sorted(maps.Keys(e)) }

var _ shell.EnvGetter = envGetter(nil)

// aliasLookup is what baseOf asks the server: whether a name is a template
// (client.Client.TemplateByAlias).
type aliasLookup func(ctx context.Context, alias string) (*client.TemplateAlias, error)

// baseOf sets the base of a build from the Dockerfile's FROM: a plain name
// ("base", "myapp", "myapp:v2") that the server knows as a template alias
// is that template (fromTemplate); anything else is an image of an OCI
// registry (fromImage; e2bdev/base is the server's base template too).
func baseOf(ctx context.Context, from string, lookup aliasLookup) (fromImage, fromTemplate string, err error) {
	if from == "" {
		return "", "base", nil
	}
	if strings.ContainsAny(from, "/@") {
		return from, "", nil
	}
	name, _, _ := strings.Cut(from, ":")
	_, err = lookup(ctx, name)
	var ae *client.APIError
	switch {
	case err == nil:
		return "", from, nil
	case client.IsNotFound(err):
		return from, "", nil
	case errors.As(err, &ae) && ae.Status == http.StatusForbidden:
		// Another team's private template: the build reports it.
		return "", from, nil
	default:
		return "", "", fmt.Errorf("FROM %s: %w", from, err)
	}
}
