// Command vulngate reads `govulncheck -format json` on stdin and decides
// the lint tier's verdict: it fails (exit 1) when the code calls a
// vulnerable function, of a required module (`go get` of the fixed version
// cures it) or of the standard library (a newer GOTOOLCHAIN in the
// Makefile cures it). Findings that the code does not call are not counted,
// as in govulncheck's own text output.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// frame is one step of a finding's trace; the first is the vulnerable
// symbol, and it names a function only when the code reaches it.
type frame struct {
	Module   string `json:"module"`
	Version  string `json:"version"`
	Package  string `json:"package"`
	Function string `json:"function"`
	Receiver string `json:"receiver"`
}

// message is one object of govulncheck's JSON stream; only findings
// matter here.
type message struct {
	Finding *struct {
		OSV          string  `json:"osv"`
		FixedVersion string  `json:"fixed_version"`
		Trace        []frame `json:"trace"`
	} `json:"finding"`
}

// verdict is what the findings add up to: one line per vulnerability.
type verdict struct {
	modules, stdlib map[string]string
}

func main() { os.Exit(run(os.Stdin, os.Stdout)) }

// run writes the verdict on the stream r to w and returns the exit code:
// 0 for no called vulnerability, 1 for some, 2 for an unreadable stream.
func run(r io.Reader, w io.Writer) int {
	v, err := read(r)
	if err != nil {
		fmt.Fprintln(w, "vulngate:", err)
		return 2
	}
	for _, line := range sorted(v.stdlib) {
		fmt.Fprintln(w, "standard library:", line)
	}
	for _, line := range sorted(v.modules) {
		fmt.Fprintln(w, "module:", line)
	}
	if len(v.modules) > 0 {
		fmt.Fprintf(w, "%d called vulnerabilities of required modules: upgrade them (go get MODULE@FIXED)\n", len(v.modules))
	}
	if len(v.stdlib) > 0 {
		fmt.Fprintf(w, "%d called vulnerabilities of the standard library: build with a Go that fixes them (GOTOOLCHAIN in the Makefile)\n", len(v.stdlib))
	}
	if len(v.modules)+len(v.stdlib) > 0 {
		return 1
	}
	fmt.Fprintln(w, "no called vulnerability")
	return 0
}

// read decodes the JSON stream and keeps the findings whose trace reaches
// a function, keyed by OSV ID.
func read(r io.Reader) (verdict, error) {
	v := verdict{modules: map[string]string{}, stdlib: map[string]string{}}
	dec := json.NewDecoder(r)
	seen := 0
	for {
		var m message
		err := dec.Decode(&m)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return v, fmt.Errorf("reading govulncheck's JSON: %w", err)
		}
		seen++
		f := m.Finding
		if f == nil || len(f.Trace) == 0 || f.Trace[0].Function == "" {
			continue
		}
		top := f.Trace[0]
		sym := top.Function
		if top.Receiver != "" {
			sym = strings.TrimPrefix(top.Receiver, "*") + "." + sym
		}
		line := fmt.Sprintf("%s: %s.%s in %s@%s, fixed in %s", f.OSV, top.Package, sym, top.Module, top.Version, f.FixedVersion)
		if top.Module == "stdlib" {
			v.stdlib[f.OSV] = line
		} else {
			v.modules[f.OSV] = line
		}
	}
	if seen == 0 {
		return v, errors.New("no output from govulncheck")
	}
	return v, nil
}

func sorted(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for _, l := range m {
		out = append(out, l)
	}
	slices.Sort(out)
	return out
}
