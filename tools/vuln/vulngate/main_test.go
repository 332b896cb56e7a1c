package main

import (
	"io"
	"strings"
	"testing"
)

// A stream as govulncheck -format json writes it: a called module finding,
// a called standard-library finding, and one the code does not call.
const stream = `{"config": {"protocol_version": "v1.0.0"}}
{"osv": {"id": "GO-2026-0001"}}
{"finding": {"osv": "GO-2026-0001", "fixed_version": "v0.62.0", "trace": [{"module": "golang.org/x/net", "version": "v0.59.0", "package": "golang.org/x/net/html", "function": "Parse"}, {"module": "example.com/m", "package": "example.com/m", "function": "main"}]}}
{"finding": {"osv": "GO-2026-0002", "fixed_version": "v1.26.9", "trace": [{"module": "stdlib", "version": "v1.26.8", "package": "net/http", "function": "Write", "receiver": "*timeoutWriter"}]}}
{"finding": {"osv": "GO-2026-0003", "fixed_version": "v0.62.0", "trace": [{"module": "golang.org/x/net", "version": "v0.59.0", "package": "golang.org/x/net/html"}]}}
`

func TestReadKeepsCalledFindings(t *testing.T) {
	v, err := read(strings.NewReader(stream))
	if err != nil {
		t.Fatal(err)
	}
	if len(v.modules) != 1 || !strings.Contains(v.modules["GO-2026-0001"], "golang.org/x/net/html.Parse in golang.org/x/net@v0.59.0, fixed in v0.62.0") {
		t.Errorf("modules = %q, want the called x/net finding only", v.modules)
	}
	if len(v.stdlib) != 1 || !strings.Contains(v.stdlib["GO-2026-0002"], "net/http.timeoutWriter.Write") {
		t.Errorf("stdlib = %q, want the called net/http finding", v.stdlib)
	}
}

func TestReadRefusesEmptyAndBrokenStreams(t *testing.T) {
	for _, in := range []string{"", `{"finding": `} {
		if _, err := read(strings.NewReader(in)); err == nil {
			t.Errorf("read(%q) = nil error, want one", in)
		}
	}
}

func TestRunFailsOnCalledFindings(t *testing.T) {
	clean := `{"config": {"protocol_version": "v1.0.0"}}` + "\n" + strings.Split(stream, "\n")[4] + "\n"
	for _, c := range []struct {
		name, in string
		want     int
	}{
		{"called module and stdlib findings", stream, 1},
		{"uncalled finding only", clean, 0},
		{"empty stream", "", 2},
	} {
		if got := run(strings.NewReader(c.in), io.Discard); got != c.want {
			t.Errorf("%s: run = %d, want %d", c.name, got, c.want)
		}
	}
}
