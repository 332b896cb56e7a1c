package templates

import (
	"context"
	"os"
	"testing"

	"github.com/warren-sandbox/warren/internal/node/layer"
)

// BenchmarkEnsureBaseFromTar measures first start with a pre-built base
// root filesystem ($WARREN_TEST_ROOTFS_TAR): unpack and register.
func BenchmarkEnsureBaseFromTar(b *testing.B) {
	tarPath := os.Getenv("WARREN_TEST_ROOTFS_TAR")
	if tarPath == "" || os.Geteuid() != 0 {
		b.Skip("needs root and WARREN_TEST_ROOTFS_TAR")
	}
	fi, err := os.Stat(tarPath)
	if err != nil {
		b.Skip(err)
	}
	b.SetBytes(fi.Size())
	for b.Loop() {
		c, err := New(Config{DataDir: b.TempDir(), BaseRootFSTar: tarPath, Mmdebstrap: "/nonexistent", UnpackRootFS: layer.UnpackRootFS})
		if err != nil {
			b.Fatal(err)
		}
		if err := c.EnsureBase(context.Background(), nil); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEnsureBaseMmdebstrap measures building base from Debian's
// packages (network to the Debian mirror; about a minute). Opt in with
// WARREN_BENCH_MMDEBSTRAP=1.
func BenchmarkEnsureBaseMmdebstrap(b *testing.B) {
	if os.Getenv("WARREN_BENCH_MMDEBSTRAP") != "1" || os.Geteuid() != 0 {
		b.Skip("opt in with WARREN_BENCH_MMDEBSTRAP=1 (as root)")
	}
	for b.Loop() {
		c, err := New(Config{DataDir: b.TempDir(), UnpackRootFS: layer.UnpackRootFS})
		if err != nil {
			b.Fatal(err)
		}
		if err := c.EnsureBase(context.Background(), nil); err != nil {
			b.Fatal(err)
		}
	}
}
