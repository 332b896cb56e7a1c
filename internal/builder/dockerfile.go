package builder

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/moby/buildkit/frontend/dockerfile/shell"

	"github.com/warren-sandbox/warren/internal/errdefs"
)

// ParseDockerfile turns a Dockerfile into a build Spec (with ContextDir
// left for the caller). Supported: one FROM, RUN, COPY/ADD (--chown,
// --chmod), ENV, ARG, WORKDIR, USER, CMD/ENTRYPOINT (the start command).
// LABEL, EXPOSE and MAINTAINER are ignored with a warning. Anything else —
// multi-stage builds, COPY --from, RUN --mount, heredocs, HEALTHCHECK,
// ONBUILD, SHELL, STOPSIGNAL, VOLUME — is refused with an error that names
// the instruction and its line. buildArgs set ARG values. Variables in
// FROM are expanded from global ARGs here; in ENV, ARG defaults, WORKDIR,
// USER and COPY/ADD they are expanded when the step runs, from the
// build's environment at that point (the base image's included), as
// Docker does; RUN commands are left to the shell.
func ParseDockerfile(r io.Reader, buildArgs map[string]string) (Spec, []string, error) {
	res, err := parser.Parse(r)
	if err != nil {
		return Spec{}, nil, fmt.Errorf("Dockerfile: %v: %w", err, errdefs.ErrInvalid)
	}
	if res.EscapeToken != '\\' {
		return Spec{}, nil, fmt.Errorf("Dockerfile: the escape directive is not supported: %w", errdefs.ErrUnsupported)
	}
	p := dfParser{lex: shell.NewLex('\\'), vars: map[string]string{}, buildArgs: buildArgs}
	for _, n := range res.AST.Children {
		if err := p.node(n); err != nil {
			return Spec{}, nil, err
		}
	}
	if !p.sawFrom {
		return Spec{}, nil, fmt.Errorf("Dockerfile: no FROM instruction: %w", errdefs.ErrInvalid)
	}
	if p.spec.StartCmd == "" {
		p.spec.StartCmd = shellJoinCmd(p.entrypoint, p.cmd)
	}
	return p.spec, p.warnings, nil
}

type dfParser struct {
	lex        *shell.Lex
	vars       map[string]string // ARG and ENV values for expansion
	buildArgs  map[string]string
	spec       Spec
	warnings   []string
	sawFrom    bool
	entrypoint []string
	cmd        []string
}

type envGetter map[string]string

func (e envGetter) Get(k string) (string, bool) { v, ok := e[k]; return v, ok }
func (e envGetter) Keys() []string {
	keys := make([]string, 0, len(e))
	for k := range e {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func (p *dfParser) expand(s string) (string, error) {
	out, _, err := p.lex.ProcessWord(s, envGetter(p.vars))
	return out, err
}

func unsupported(n *parser.Node, what string) error {
	return fmt.Errorf("Dockerfile line %d: %s is not supported: %w", n.StartLine, what, errdefs.ErrUnsupported)
}

// args returns the instruction's arguments (JSON or shell form).
func args(n *parser.Node) []string {
	var out []string
	for a := n.Next; a != nil; a = a.Next {
		out = append(out, a.Value)
	}
	return out
}

func (p *dfParser) node(n *parser.Node) error {
	instr := strings.ToUpper(n.Value)
	if len(n.Heredocs) > 0 {
		return unsupported(n, instr+" with a heredoc")
	}
	if !p.sawFrom && instr != "FROM" && instr != "ARG" {
		return fmt.Errorf("Dockerfile line %d: %s before FROM: %w", n.StartLine, instr, errdefs.ErrInvalid)
	}
	a := args(n)
	switch instr {
	case "FROM":
		if p.sawFrom {
			return unsupported(n, "a second FROM (multi-stage build)")
		}
		if len(n.Flags) > 0 {
			return unsupported(n, "FROM "+strings.Join(n.Flags, " "))
		}
		if len(a) == 0 {
			return fmt.Errorf("Dockerfile line %d: FROM needs an image: %w", n.StartLine, errdefs.ErrInvalid)
		}
		img, err := p.expand(a[0])
		if err != nil {
			return fmt.Errorf("Dockerfile line %d: %v: %w", n.StartLine, err, errdefs.ErrInvalid)
		}
		if img == "scratch" {
			return unsupported(n, "FROM scratch")
		}
		p.sawFrom = true
		p.spec.FromImage = img
	case "ARG":
		for _, kv := range a {
			name, def, hasDef := strings.Cut(kv, "=")
			v, given := p.buildArgs[name]
			if !given && hasDef {
				v = def
			}
			if !p.sawFrom {
				// A global ARG only serves FROM.
				exp, err := p.expand(v)
				if err != nil {
					return fmt.Errorf("Dockerfile line %d: %v: %w", n.StartLine, err, errdefs.ErrInvalid)
				}
				p.vars[name] = exp
				continue
			}
			p.spec.Steps = append(p.spec.Steps, Step{Type: StepArg, Args: []string{name, v}, Expand: !given})
		}
	case "ENV":
		// The parser yields (key, value, separator) triples.
		if len(a)%3 != 0 || len(a) == 0 {
			return fmt.Errorf("Dockerfile line %d: ENV needs KEY=VALUE pairs: %w", n.StartLine, errdefs.ErrInvalid)
		}
		step := Step{Type: StepEnv, Expand: true}
		for i := 0; i < len(a); i += 3 {
			step.Args = append(step.Args, a[i], a[i+1])
		}
		p.spec.Steps = append(p.spec.Steps, step)
	case "RUN":
		if len(n.Flags) > 0 {
			return unsupported(n, "RUN "+strings.Join(n.Flags, " "))
		}
		cmd := strings.Join(a, " ")
		if n.Attributes["json"] {
			cmd = shellJoin(a)
		}
		p.spec.Steps = append(p.spec.Steps, Step{Type: StepRun, Args: []string{cmd}})
	case "COPY", "ADD":
		chown, chmod := "", ""
		for _, f := range n.Flags {
			k, v, _ := strings.Cut(strings.TrimPrefix(f, "--"), "=")
			switch k {
			case "chown":
				chown = v
			case "chmod":
				if _, err := strconv.ParseUint(v, 8, 32); err != nil {
					return fmt.Errorf("Dockerfile line %d: --chmod=%s is not octal: %w", n.StartLine, v, errdefs.ErrInvalid)
				}
				chmod = v
			case "link":
			case "from":
				return unsupported(n, instr+" --from (multi-stage build)")
			default:
				return unsupported(n, instr+" "+f)
			}
		}
		if len(a) < 2 {
			return fmt.Errorf("Dockerfile line %d: %s needs a source and a destination: %w", n.StartLine, instr, errdefs.ErrInvalid)
		}
		dest := a[len(a)-1]
		srcs := a[:len(a)-1]
		if len(srcs) > 1 && !strings.HasSuffix(dest, "/") {
			return fmt.Errorf("Dockerfile line %d: %s with several sources needs a destination ending in /: %w", n.StartLine, instr, errdefs.ErrInvalid)
		}
		for _, src := range srcs {
			if instr == "ADD" && strings.Contains(src, "://") {
				return unsupported(n, "ADD from a URL")
			}
			p.spec.Steps = append(p.spec.Steps, Step{Type: instr, Args: []string{src, dest, chown, chmod}, Expand: true})
		}
	case "WORKDIR", "USER":
		if len(a) != 1 {
			return fmt.Errorf("Dockerfile line %d: %s needs one argument: %w", n.StartLine, instr, errdefs.ErrInvalid)
		}
		p.spec.Steps = append(p.spec.Steps, Step{Type: instr, Args: []string{a[0]}, Expand: true})
	case "CMD":
		p.cmd = a
		if !n.Attributes["json"] {
			p.cmd = []string{"/bin/sh", "-c", strings.Join(a, " ")}
		}
	case "ENTRYPOINT":
		p.entrypoint = a
		if !n.Attributes["json"] {
			p.entrypoint = []string{"/bin/sh", "-c", strings.Join(a, " ")}
		}
		p.cmd = nil // Docker resets CMD when ENTRYPOINT is set
	case "LABEL", "EXPOSE", "MAINTAINER":
		p.warnings = append(p.warnings, fmt.Sprintf("line %d: %s is ignored", n.StartLine, instr))
	default:
		return unsupported(n, instr)
	}
	return nil
}

// shellJoinCmd renders ENTRYPOINT + CMD as one shell command line.
func shellJoinCmd(entrypoint, cmd []string) string {
	all := append(append([]string{}, entrypoint...), cmd...)
	if len(all) == 0 {
		return ""
	}
	if len(all) == 3 && all[0] == "/bin/sh" && all[1] == "-c" {
		return all[2]
	}
	return shellJoin(all)
}

// expandStep expands variables in a Dockerfile step's arguments with env
// (the build's ARG and ENV values at that step).
func expandStep(s Step, env map[string]string) (Step, error) {
	lex := shell.NewLex('\\')
	out := s
	out.Args = slices.Clone(s.Args)
	exp := func(i int) error {
		if i >= len(out.Args) {
			return nil
		}
		v, _, err := lex.ProcessWord(out.Args[i], envGetter(env))
		if err != nil {
			return fmt.Errorf("%s: %v: %w", s.Type, err, errdefs.ErrInvalid)
		}
		out.Args[i] = v
		return nil
	}
	var idx []int
	switch s.Type {
	case StepEnv:
		for i := 1; i < len(s.Args); i += 2 {
			idx = append(idx, i)
		}
	case StepArg:
		idx = []int{1}
	case StepCopy, StepAdd:
		idx = []int{0, 1, 2}
	case StepWorkdir, StepUser:
		idx = []int{0}
	}
	for _, i := range idx {
		if err := exp(i); err != nil {
			return Step{}, err
		}
	}
	return out, nil
}
