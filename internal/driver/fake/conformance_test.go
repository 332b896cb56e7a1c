package fake_test

import (
	"path/filepath"
	"testing"

	"github.com/warren-sandbox/warren/internal/driver"
	"github.com/warren-sandbox/warren/internal/driver/drivertest"
	"github.com/warren-sandbox/warren/internal/driver/fake"
)

func TestConformance(t *testing.T) {
	d := fake.New(fake.Config{})
	drivertest.Run(t, drivertest.Harness{
		Driver:    d,
		Simulated: true,
		NewSpec: func(t testing.TB, o drivertest.SpecOptions) driver.Spec {
			id := o.ID
			if id == "" {
				id = drivertest.NewID()
			}
			dir := t.TempDir()
			return driver.Spec{
				ID:        id,
				BundleDir: filepath.Join(dir, "bundle"),
				RootFS:    filepath.Join(dir, "rootfs"),
				Hostname:  "sbx-test",
			}
		},
	})
}
