package app

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
)

// absPaths resolves the configuration's relative paths against the
// working directory once, at start, so that every part (the driver's OCI
// bundles, the node's state, the builder) gets absolute ones. A binary
// given as a bare name (no '/') is left for PATH lookup.
func (c *Config) absPaths() error {
	for _, p := range []struct {
		name   string
		v      *string
		binary bool
	}{
		{"data dir", &c.DataDir, false},
		{"base rootfs", &c.BaseRootFSTar, false},
		{"tls cert", &c.TLSCert, false},
		{"tls key", &c.TLSKey, false},
		{"runsc", &c.RunscPath, true},
		{"runc", &c.RuncPath, true},
		{"envd", &c.EnvdPath, false},
	} {
		if *p.v == "" || filepath.IsAbs(*p.v) || p.binary && !strings.Contains(*p.v, "/") {
			continue
		}
		abs, err := filepath.Abs(*p.v)
		if err != nil {
			return fmt.Errorf("%s %q: %w", p.name, *p.v, err)
		}
		*p.v = abs
	}
	return nil
}

// privateDataDir makes the data dir, or narrows an existing one, to mode
// 0700. It holds template trees built from tenants' Dockerfiles, whose
// set-user-ID binaries and file capabilities are kept as built; a data
// dir that other host users may enter (systemd's StateDirectory= and a
// Kubernetes hostPath make 0755 ones) would let any of them run such a
// binary on the host as its owner.
func privateDataDir(dir string, log *slog.Logger) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("data dir %s: %w", dir, err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("data dir %s: %w", dir, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("data dir %s is not a directory", dir)
	}
	if fi.Mode().Perm()&0o077 == 0 {
		return nil
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("data dir %s: narrowing mode %v to 0700: %w", dir, fi.Mode().Perm(), err)
	}
	log.Info("data dir narrowed to its owner", "data_dir", dir, "was", fi.Mode().Perm().String())
	return nil
}
