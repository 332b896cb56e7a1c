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
// the instruction and its line. buildArgs set ARG values. Variables are
// expanded from the Dockerfile's own ARG and ENV (not from the base
// image's environment).
func ParseDockerfile(r io.Reader, buildArgs map[string]string) (Spec, []string, error) {
	res, err := parser.Parse(r)
	if err != nil {
		return Spec{}, nil, fmt.Errorf("Dockerfile: %v: %w", err, errdefs.ErrInvalid)
	}
	p := dfParser{lex: shell.NewLex(res.EscapeToken), vars: map[string]string{}, buildArgs: buildArgs}
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
				var err error
				if v, err = p.expand(def); err != nil {
					return fmt.Errorf("Dockerfile line %d: %v: %w", n.StartLine, err, errdefs.ErrInvalid)
				}
			}
			p.vars[name] = v
			if p.sawFrom {
				p.spec.Steps = append(p.spec.Steps, Step{Type: StepArg, Args: []string{name, v}})
			}
		}
	case "ENV":
		if len(a)%2 != 0 || len(a) == 0 {
			return fmt.Errorf("Dockerfile line %d: ENV needs KEY=VALUE pairs: %w", n.StartLine, errdefs.ErrInvalid)
		}
		step := Step{Type: StepEnv}
		for i := 0; i < len(a); i += 2 {
			v, err := p.expand(a[i+1])
			if err != nil {
				return fmt.Errorf("Dockerfile line %d: %v: %w", n.StartLine, err, errdefs.ErrInvalid)
			}
			p.vars[a[i]] = v
			step.Args = append(step.Args, a[i], v)
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
		exp := make([]string, len(a))
		for i, s := range a {
			v, err := p.expand(s)
			if err != nil {
				return fmt.Errorf("Dockerfile line %d: %v: %w", n.StartLine, err, errdefs.ErrInvalid)
			}
			exp[i] = v
		}
		dest := exp[len(exp)-1]
		srcs := exp[:len(exp)-1]
		if len(srcs) > 1 && !strings.HasSuffix(dest, "/") {
			return fmt.Errorf("Dockerfile line %d: %s with several sources needs a destination ending in /: %w", n.StartLine, instr, errdefs.ErrInvalid)
		}
		chownExp, err := p.expand(chown)
		if err != nil {
			return fmt.Errorf("Dockerfile line %d: %v: %w", n.StartLine, err, errdefs.ErrInvalid)
		}
		for _, src := range srcs {
			if instr == "ADD" && strings.Contains(src, "://") {
				return unsupported(n, "ADD from a URL")
			}
			p.spec.Steps = append(p.spec.Steps, Step{Type: instr, Args: []string{src, dest, chownExp, chmod}})
		}
	case "WORKDIR", "USER":
		if len(a) != 1 {
			return fmt.Errorf("Dockerfile line %d: %s needs one argument: %w", n.StartLine, instr, errdefs.ErrInvalid)
		}
		v, err := p.expand(a[0])
		if err != nil {
			return fmt.Errorf("Dockerfile line %d: %v: %w", n.StartLine, err, errdefs.ErrInvalid)
		}
		p.spec.Steps = append(p.spec.Steps, Step{Type: instr, Args: []string{v}})
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
