package runc

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/warren-sandbox/warren/internal/driver"
	"github.com/warren-sandbox/warren/internal/driver/drivertest"
)

func TestMain(m *testing.M) { drivertest.Main(m) }

// RuncEnv overrides the runc binary the tests use (default /usr/sbin/runc).
const RuncEnv = "WARREN_RUNC"

func runcPath() string {
	if p := os.Getenv(RuncEnv); p != "" {
		return p
	}
	return "/usr/sbin/runc"
}

// newTestDriver returns a driver with its own state dir and the host half
// of the harness, or skips (fails under CI) when a prerequisite is missing.
func newTestDriver(t testing.TB) (*Driver, *drivertest.Host) {
	t.Helper()
	host := drivertest.NewHost(t)
	_, err := os.Stat(runcPath())
	drivertest.Require(t, err == nil, "needs runc at "+runcPath()+" (apt-get install runc)")
	state := t.TempDir()
	d, err := New(Config{Path: runcPath(), StateDir: state})
	if err != nil {
		t.Fatal(err)
	}
	host.StateDirs = []string{d.RuntimeRoot(), filepath.Join(state, "sandboxes")}
	return d, host
}

func TestConformance(t *testing.T) {
	d, host := newTestDriver(t)
	drivertest.Run(t, drivertest.Harness{
		Driver:    d,
		NewSpec:   host.NewSpec,
		Leftovers: host.Leftovers,
		Reopen: func(t testing.TB) driver.Driver {
			d2, err := New(d.cfg)
			if err != nil {
				t.Fatal(err)
			}
			return d2
		},
	})
}
