package runsc

import (
	"testing"

	"github.com/warren-sandbox/warren/internal/driver/drivertest"
)

// Run with:
//
//	go test -run '^$' -bench . -benchtime 20x ./internal/driver/runsc ./internal/driver/runc

func benchHarness(b *testing.B) drivertest.Harness {
	d, host := newTestDriver(b)
	return drivertest.Harness{Driver: d, NewSpec: host.NewSpec}
}

func BenchmarkStartDelete(b *testing.B) { drivertest.BenchStartDelete(b, benchHarness(b)) }
func BenchmarkExec(b *testing.B)        { drivertest.BenchExec(b, benchHarness(b)) }
func BenchmarkCheckpoint(b *testing.B)  { drivertest.BenchCheckpoint(b, benchHarness(b)) }
func BenchmarkRestore(b *testing.B)     { drivertest.BenchRestore(b, benchHarness(b)) }
