package builder

import (
	"encoding/json"
	"path"
	"strings"
	"testing"
)

// Fuzz targets of the parsers of tenant input: a Dockerfile, the steps of
// the build API (JSON) and their expansion, and COPY sources. Seeds are in
// testdata/fuzz/<target>; scripts/fuzz.sh runs each target for a bounded
// time.

// FuzzParseDockerfile: any Dockerfile parses or fails with an error, and
// the steps it gives expand and validate without panicking.
func FuzzParseDockerfile(f *testing.F) {
	f.Add("FROM alpine\nARG V=1\nENV A=$V B=${V:-x}\nWORKDIR /w\nCOPY --chown=u:g --chmod=0755 a b ./\nRUN echo $A\nUSER u\nCMD [\"sh\"]\n")
	f.Add("FROM scratch\nADD x.tar /\nENV P=${P:?unset}\n")
	f.Add("FROM a\nRUN <<EOF\necho hi\nEOF\n")
	f.Fuzz(func(t *testing.T, df string) {
		spec, _, err := ParseDockerfile(strings.NewReader(df), map[string]string{"V": "2"})
		if err != nil {
			return
		}
		vars := map[string]string{"PATH": "/bin", "V": "3"}
		for _, s := range spec.Steps {
			if s.Expand {
				if s, err = expandStep(s, vars); err != nil {
					continue
				}
			}
			_ = validateStep(s)
			if s.Type == StepCopy || s.Type == StepAdd {
				checkCleanSource(t, s.Args[0])
			}
		}
	})
}

// FuzzStepJSON: any body of the build API's steps decodes or fails, and
// decoded steps validate and expand without panicking.
func FuzzStepJSON(f *testing.F) {
	f.Add(`{"steps":[{"type":"COPY","args":["app","/app","user","0755"],"filesHash":"ab"},{"type":"RUN","args":["echo $X"],"expand":true}]}`)
	f.Add(`{"steps":[{"type":"ENV","args":["A","${B:-c}","D"]}]}`)
	f.Add(`{"steps":[{"type":"COPY","args":["../../etc/shadow","/x"]}]}`)
	f.Fuzz(func(t *testing.T, body string) {
		var spec Spec
		if json.Unmarshal([]byte(body), &spec) != nil {
			return
		}
		for _, s := range spec.Steps {
			if validateStep(s) != nil {
				continue
			}
			if s.Expand {
				var err error
				if s, err = expandStep(s, map[string]string{"B": "b"}); err != nil {
					continue
				}
			}
			if s.Type == StepCopy || s.Type == StepAdd {
				checkCleanSource(t, s.Args[0])
			}
		}
	})
}

// checkCleanSource: a source cleanSource accepts is relative, clean and
// never climbs out.
func checkCleanSource(t *testing.T, src string) {
	t.Helper()
	rel, err := cleanSource(src)
	if err != nil {
		return
	}
	if path.IsAbs(rel) || rel == ".." || strings.HasPrefix(rel, "../") || path.Clean(rel) != rel {
		t.Fatalf("cleanSource(%q) = %q: escapes the context", src, rel)
	}
}
