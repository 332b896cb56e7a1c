package main

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"testing"

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
}
