package runsc

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/warren-sandbox/warren/internal/driver"
	"github.com/warren-sandbox/warren/internal/driver/drivertest"
)

func TestMain(m *testing.M) { drivertest.Main(m) }

// RunscEnv names the runsc binary the tests use.
const RunscEnv = "WARREN_RUNSC"

// newTestDriver returns a driver with its own state dir and the host half
// of the harness, or skips (fails under CI) when a prerequisite is missing.
func newTestDriver(t testing.TB) (*Driver, *drivertest.Host) {
	t.Helper()
	host := drivertest.NewHost(t)
	bin := os.Getenv(RunscEnv)
	_, err := os.Stat(bin)
	drivertest.Require(t, bin != "" && err == nil, "needs a static runsc binary at $"+RunscEnv)
	state := t.TempDir()
	d, err := New(Config{Path: bin, StateDir: state})
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
