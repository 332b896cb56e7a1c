package mcpgateway

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// TestParseConfigErrors: every server a config cannot satisfy is named,
// with why; values never appear in the errors.
func TestParseConfigErrors(t *testing.T) {
	t.Parallel()
	l := DefaultLayout()
	for _, tc := range []struct {
		name, config string
		want         []string
	}{
		{"not an object", `["memory"]`, []string{"config: must be a JSON object"}},
		{"not JSON", `{"memory":`, []string{"config:"}},
		{"unknown name", `{"invalid_server":{}}`, []string{`server "invalid_server": not in this gateway's catalog (it has: astroDocs, cloudflareDocs, everything, filesystem, memory, sequentialthinking`}},
		{"a name of upstream's catalog", `{"brave":{"apiKey":"k-0123456789"}}`, []string{`server "brave": not in this gateway's catalog`}},
		{"settings not an object", `{"memory":"yes"}`, []string{`server "memory": its settings must be a JSON object`}},
		{"unknown setting", `{"memory":{"path":"/x"}}`, []string{`server "memory": unknown setting "path"`}},
		{"paths missing", `{"filesystem":{}}`, []string{`server "filesystem": "paths" is required`}},
		{"paths wrong type", `{"filesystem":{"paths":"/home/user"}}`, []string{`server "filesystem": "paths" must be of type array of string`}},
		{"relative path", `{"filesystem":{"paths":["home"]}}`, []string{`server "filesystem": "paths": "home" is not a clean absolute path`}},
		{"unclean path", `{"filesystem":{"paths":["/home/../etc"]}}`, []string{`"/home/../etc" is not a clean absolute path`}},
		{"github without repo", `{"github/acme":{"runCmd":"x"}}`, []string{`server "github/acme": a repository server's name is github/<owner>/<repo>`}},
		{"github traversal", `{"github/acme/..":{"runCmd":"x"}}`, []string{`server "github/acme/..": a repository server's name`}},
		{"github bad owner", `{"github/-x/y":{"runCmd":"x"}}`, []string{`server "github/-x/y": a repository server's name`}},
		{"github nested", `{"github/a/b/c":{"runCmd":"x"}}`, []string{`server "github/a/b/c": a repository server's name`}},
		{"github no runCmd", `{"github/acme/tools":{"installCmd":"npm i"}}`, []string{`server "github/acme/tools": "runCmd" is required`}},
		{"github bad env", `{"github/acme/tools":{"runCmd":"x","envs":{"A-B":"v"}}}`, []string{`server "github/acme/tools": envs: "A-B" is not an environment variable name`}},
		{"github env not a string", `{"github/acme/tools":{"runCmd":"x","envs":{"KEY":1}}}`, []string{`server "github/acme/tools": "envs.KEY" must be of type string`}},
		{"github unknown field", `{"github/acme/tools":{"runCmd":"x","cmd":"y"}}`, []string{`server "github/acme/tools": unknown setting "cmd"`}},
		{"several", `{"nope":{},"memory":{"x":1},"filesystem":{"paths":[]}}`, []string{`server "nope"`, `server "memory"`, `server "filesystem"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := ParseConfig([]byte(tc.config), l)
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "k-0123456789") {
				t.Errorf("error quotes a value: %q", err)
			}
		})
	}
}

// TestParseConfig: what each kind of server starts with.
func TestParseConfig(t *testing.T) {
	t.Parallel()
	l := DefaultLayout()
	l.StateDir = "/state"
	servers, err := ParseConfig([]byte(`{
		"memory": {}, "everything": null, "filesystem": {"paths": ["/home/user", "/tmp"]}, "astroDocs": {},
		"github/acme/my.tools": {"runCmd": "node dist/index.js", "installCmd": "npm ci", "envs": {"API_KEY": "k-secret-123456", "MODE": "fast"}}
	}`), l)
	if err != nil {
		t.Fatal(err)
	}
	names := serverNames(servers)
	if want := []string{"astroDocs", "everything", "filesystem", "github/acme/my.tools", "memory"}; !slices.Equal(names, want) {
		t.Fatalf("servers %q, want %q", names, want)
	}
	byName := map[string]*Server{}
	for _, s := range servers {
		byName[s.Name] = s
	}
	if s := byName["filesystem"]; !slices.Equal(s.Args, []string{"/home/user", "/tmp"}) || s.Entry.Bin != "mcp-server-filesystem" {
		t.Errorf("filesystem: %+v", s)
	}
	if s := byName["memory"]; !slices.Equal(s.Env, []string{"MEMORY_FILE_PATH=/state/memory.jsonl"}) {
		t.Errorf("memory: %+v", s)
	}
	if s := byName["everything"]; !slices.Equal(s.Args, []string{"stdio"}) {
		t.Errorf("everything: %+v", s)
	}
	if s := byName["astroDocs"]; !s.Entry.Remote() {
		t.Errorf("astroDocs: %+v", s)
	}
	g := byName["github/acme/my.tools"]
	if g.GitHub == nil || g.GitHub.Owner != "acme" || g.GitHub.Repo != "my.tools" || g.GitHub.RunCmd != "node dist/index.js" || g.GitHub.InstallCmd != "npm ci" ||
		!slices.Equal(g.Env, []string{"API_KEY=k-secret-123456", "MODE=fast"}) || g.Alias != "github_acme_my_tools" {
		t.Errorf("github server: %+v %+v", g, g.GitHub)
	}
	if !slices.Contains(g.Secrets, "k-secret-123456") {
		t.Errorf("secrets %q", g.Secrets)
	}
	if _, err := ParseConfig([]byte(`{}`), l); err != nil {
		t.Errorf("an empty config: %v", err)
	}
}

// TestRedact: secrets of 8 characters or more go, the longest first,
// wherever they are in a line.
func TestRedact(t *testing.T) {
	t.Parallel()
	r := newRedactor("abcdefgh", "abcdefgh-longer", "short", "")
	if got := r.String("x abcdefgh-longer y abcdefghz short"); got != "x [redacted] y [redacted]z short" {
		t.Fatalf("%q", got)
	}
	tail := &lineTail{redact: r}
	_, _ = tail.Write([]byte("one abcdefgh\ntwo "))
	_, _ = tail.Write([]byte("abcdefgh-longer\nthree"))
	if got := tail.Tail(); got != "one [redacted]\ntwo [redacted]\nthree" {
		t.Fatalf("tail %q", got)
	}
	b, _ := json.Marshal(map[string]string{"k": "abcdefgh"})
	if got := r.String(string(b)); strings.Contains(got, "abcdefgh") {
		t.Fatalf("%q", got)
	}
}
