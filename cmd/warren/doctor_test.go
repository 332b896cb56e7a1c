package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/warren-sandbox/warren/internal/app/serve"
	"github.com/warren-sandbox/warren/internal/doctor"
)

func TestDoctorReportsMissingRuntime(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "no-such-runsc")
	out, err := runCmd(t, "doctor", "--json", "--runsc", missing, "--data-dir", t.TempDir())
	if !errors.As(err, new(errDoctorFailed)) {
		t.Fatalf("doctor with a missing runsc: err = %v, want errDoctorFailed", err)
	}
	var results []doctor.Result
	if err := json.Unmarshal([]byte(out), &results); err != nil {
		t.Fatalf("doctor --json output is not JSON: %v\n%s", err, out)
	}
	var runsc *doctor.Result
	for i := range results {
		if results[i].Name == "runsc" {
			runsc = &results[i]
		}
	}
	if runsc == nil {
		t.Fatalf("no runsc check in %s", out)
	}
	if runsc.Status != doctor.Fail || runsc.Fix == "" {
		t.Fatalf("runsc check = %+v, want a failure with a fix", *runsc)
	}
	want, _, _ := serve.HostPoolSize(defaultMemberMiB)
	var pool bool
	for _, r := range results {
		if r.Name == "warm pool" {
			pool = true
			if !strings.Contains(r.Detail, fmt.Sprintf("keeps %d ready base sandboxes", want)) {
				t.Errorf("warm pool line %q does not say the automatic size %d", r.Detail, want)
			}
		}
	}
	if !pool {
		t.Errorf("no warm pool line in %s", out)
	}
}
