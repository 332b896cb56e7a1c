package builder

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/warren-sandbox/warren/internal/errdefs"
)

func TestParseDockerfile(t *testing.T) {
	t.Parallel()
	df := `# syntax=docker/dockerfile:1
ARG BASE=python:3.12
FROM ${BASE}
ARG VERSION=1.0
ENV APP_HOME=/srv/app PATH=/srv/app/bin:$PATH
ENV LEGACY value with spaces
WORKDIR $APP_HOME
COPY --chown=user:user --chmod=0755 a.sh b.sh ./bin/
ADD data.tar /data/
RUN pip install foo==$VERSION \
    && echo done
RUN ["python", "-c", "print('hi there')"]
USER user
LABEL org.example=1
EXPOSE 8000
CMD ["python", "-m", "http.server", "8000"]
`
	spec, warnings, err := ParseDockerfile(strings.NewReader(df), map[string]string{"VERSION": "2.0"})
	if err != nil {
		t.Fatal(err)
	}
	want := Spec{
		FromImage: "python:3.12",
		StartCmd:  "python -m http.server 8000",
		Steps: []Step{
			{Type: StepArg, Args: []string{"VERSION", "2.0"}},
			{Type: StepEnv, Args: []string{"APP_HOME", "/srv/app", "PATH", "/srv/app/bin:$PATH"}, Expand: true},
			{Type: StepEnv, Args: []string{"LEGACY", "value with spaces"}, Expand: true},
			{Type: StepWorkdir, Args: []string{"$APP_HOME"}, Expand: true},
			{Type: StepCopy, Args: []string{"a.sh", "./bin/", "user:user", "0755"}, Expand: true},
			{Type: StepCopy, Args: []string{"b.sh", "./bin/", "user:user", "0755"}, Expand: true},
			{Type: StepAdd, Args: []string{"data.tar", "/data/", "", ""}, Expand: true},
			{Type: StepRun, Args: []string{"pip install foo==$VERSION     && echo done"}},
			{Type: StepRun, Args: []string{`python -c 'print('\''hi there'\'')'`}},
			{Type: StepUser, Args: []string{"user"}, Expand: true},
		},
	}
	if !reflect.DeepEqual(spec, want) {
		t.Errorf("spec\n got %+v\nwant %+v", spec, want)
	}
	if len(warnings) != 2 || !strings.Contains(warnings[0], "LABEL") {
		t.Errorf("warnings %q", warnings)
	}
}

func TestParseDockerfileRefuses(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, df, wantMsg string
		class             error
	}{
		{"healthcheck", "FROM alpine\nRUN true\nHEALTHCHECK CMD true\n", "line 3: HEALTHCHECK is not supported", errdefs.ErrUnsupported},
		{"onbuild", "FROM alpine\nONBUILD RUN true\n", "ONBUILD is not supported", errdefs.ErrUnsupported},
		{"shell", "FROM alpine\nSHELL [\"/bin/bash\", \"-c\"]\n", "SHELL is not supported", errdefs.ErrUnsupported},
		{"volume", "FROM alpine\nVOLUME /data\n", "VOLUME is not supported", errdefs.ErrUnsupported},
		{"stopsignal", "FROM alpine\nSTOPSIGNAL SIGTERM\n", "STOPSIGNAL is not supported", errdefs.ErrUnsupported},
		{"multi-stage", "FROM alpine AS a\nFROM alpine\n", "multi-stage", errdefs.ErrUnsupported},
		{"copy from", "FROM alpine\nCOPY --from=a /x /y\n", "COPY --from", errdefs.ErrUnsupported},
		{"run mount", "FROM alpine\nRUN --mount=type=cache,target=/c true\n", "RUN --mount", errdefs.ErrUnsupported},
		{"heredoc", "FROM alpine\nRUN <<EOF\necho hi\nEOF\n", "heredoc", errdefs.ErrUnsupported},
		{"add url", "FROM alpine\nADD https://example.com/x /x\n", "ADD from a URL", errdefs.ErrUnsupported},
		{"scratch", "FROM scratch\n", "FROM scratch", errdefs.ErrUnsupported},
		{"no from", "RUN true\n", "RUN before FROM", errdefs.ErrInvalid},
		{"empty", "# nothing\n", "no instructions", errdefs.ErrInvalid},
		{"several sources", "FROM alpine\nCOPY a b /dest\n", "ending in /", errdefs.ErrInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, _, err := ParseDockerfile(strings.NewReader(tc.df), nil)
			if err == nil || !strings.Contains(err.Error(), tc.wantMsg) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.wantMsg)
			}
			if !errorsIs(err, tc.class) {
				t.Fatalf("err = %v, want class %v", err, tc.class)
			}
		})
	}
}

func errorsIs(err, target error) bool { return errors.Is(err, target) }

func TestExpandStep(t *testing.T) {
	t.Parallel()
	env := map[string]string{"PATH": "/usr/bin", "HOME": "/home/u", "Q": "a b"}
	tests := []struct {
		in, want Step
	}{
		{Step{Type: StepEnv, Args: []string{"PATH", "/x:$PATH", "K", "${HOME}/k"}}, Step{Type: StepEnv, Args: []string{"PATH", "/x:/usr/bin", "K", "/home/u/k"}}},
		{Step{Type: StepWorkdir, Args: []string{"$HOME/app"}}, Step{Type: StepWorkdir, Args: []string{"/home/u/app"}}},
		{Step{Type: StepEnv, Args: []string{"V", `"$Q"`}}, Step{Type: StepEnv, Args: []string{"V", "a b"}}},
		{Step{Type: StepCopy, Args: []string{"$NOPE.txt", "/d/", "", "0644"}}, Step{Type: StepCopy, Args: []string{".txt", "/d/", "", "0644"}}},
	}
	for _, tc := range tests {
		t.Run(tc.in.Args[len(tc.in.Args)-1], func(t *testing.T) {
			got, err := expandStep(tc.in, env)
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("= %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}
