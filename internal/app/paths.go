package app

import (
	"fmt"
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
