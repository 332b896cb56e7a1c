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
// ParseDockerfile leaves the variables of ENV, ARG defaults, COPY/ADD,
// WORKDIR and USER to be expanded when the step runs, from the build's
// environment at that point, the base image's ENV included (Docker's
// rule: `ENV PATH=/opt/bin:$PATH` extends the image's PATH). Only the
// server knows that environment, so those steps go as written with
// Warren's `expand` extension, and the server expands them. A --build-arg
// value is literal (not expanded), as in Docker.
//
// One part is resolved here: a COPY/ADD source names files of the local
// build context, which are uploaded before the build starts. It is
// expanded from the ARG and ENV values the Dockerfile sets (ENV over
// ARG); a reference to a variable without such a value — one of the base
// image — is refused with a message that says so. The resolved source is
// sent escaped, so that the server's expansion leaves it as it is.

// apiSteps returns the API steps of spec and, by step index, the source
// of each COPY/ADD step as resolved here (what copyFiles reads). The COPY
// and ADD steps still lack their FilesHash (copyFiles sets it).
func apiSteps(spec builder.Spec) ([]client.TemplateStep, map[int]string, error) {
	// Values known here; known is false for one that depends on a
	// variable the Dockerfile does not set (the server's to expand).
	type value struct {
		v     string
		known bool
	}
	args, env := map[string]value{}, map[string]value{}
	vars := func() map[string]string {
		out := map[string]string{}
		for _, m := range []map[string]value{args, env} { // ENV over ARG
			for k, v := range m {
				if v.known {
					out[k] = v.v
				} else {
					delete(out, k)
				}
			}
		}
		return out
	}
	lex := shell.NewLex('\\')
	local := func(word string, vars map[string]string) value {
		res, err := lex.ProcessWordWithMatches(word, envGetter(vars))
		if err != nil || len(res.Unmatched) > 0 {
			return value{}
		}
		return value{v: res.Result, known: true}
	}
	out := make([]client.TemplateStep, 0, len(spec.Steps))
	srcs := map[int]string{}
	for i, s := range spec.Steps {
		st := client.TemplateStep{Type: s.Type, Args: slices.Clone(s.Args), Force: s.Force, Expand: s.Expand}
		switch s.Type {
		case builder.StepEnv:
			before := vars() // every pair sees the environment before the step
			for j := 0; j+1 < len(s.Args); j += 2 {
				v := value{v: s.Args[j+1], known: true}
				if s.Expand {
					v = local(s.Args[j+1], before)
				}
				env[s.Args[j]] = v
			}
		case builder.StepArg:
			if _, set := args[s.Args[0]]; !set || len(s.Args) > 1 {
				v := value{known: true}
				if len(s.Args) > 1 {
					v.v = s.Args[1]
					if s.Expand {
						v = local(s.Args[1], vars())
					}
				}
				args[s.Args[0]] = v
			}
		case builder.StepCopy, builder.StepAdd:
			if len(s.Args) == 0 {
				break // copyFiles names the step
			}
			src := s.Args[0]
			if s.Expand {
				res, err := lex.ProcessWordWithMatches(src, envGetter(vars()))
				if err != nil {
					return nil, nil, fmt.Errorf("Dockerfile step %d (%s): source: %v: %w", i+1, describeStep(s), err, errdefs.ErrInvalid)
				}
				if len(res.Unmatched) > 0 {
					names := slices.Sorted(maps.Keys(res.Unmatched))
					return nil, nil, fmt.Errorf("Dockerfile step %d (%s): $%s has no value from the Dockerfile's ARG and ENV; a %s source names files of the build context, read here, where the base image's variables are not known: write the source out: %w",
						i+1, describeStep(s), strings.Join(names, ", $"), s.Type, errdefs.ErrUnsupported)
				}
				src = res.Result
				st.Args[0] = escapeWord(src)
			}
			srcs[i] = src
		}
		out = append(out, st)
	}
	return out, srcs, nil
}

func describeStep(s builder.Step) string {
	return strings.TrimSpace(s.Type + " " + strings.Join(s.Args, " "))
}

// escapeWord escapes s for Dockerfile variable expansion: expanded, it is
// s again.
func escapeWord(s string) string { return wordEscaper.Replace(s) }

var wordEscaper = strings.NewReplacer(`\`, `\\`, `$`, `\$`, `'`, `\'`, `"`, `\"`)

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
