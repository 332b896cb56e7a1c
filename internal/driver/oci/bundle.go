package oci

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/warren-sandbox/warren/internal/driver"
)

// Names of the files in a bundle directory.
const (
	ConfigFile     = "config.json"
	HostnameFile   = "hostname"
	HostsFile      = "hosts"
	ResolvConfFile = "resolv.conf"
	execDir        = "exec"
)

// DefaultHosts is /etc/hosts when the spec gives none.
const DefaultHosts = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"

// WriteBundle writes config.json and the files it bind-mounts into
// s.BundleDir (created if missing, mode 0700).
func WriteBundle(s driver.Spec, spec *specs.Spec) error {
	if err := os.MkdirAll(s.BundleDir, 0o700); err != nil {
		return fmt.Errorf("sandbox %q: bundle dir: %w", s.ID, err)
	}
	data, err := json.MarshalIndent(spec, "", "\t")
	if err != nil {
		return fmt.Errorf("sandbox %q: marshal OCI spec: %w", s.ID, err)
	}
	hosts := s.Hosts
	if hosts == "" {
		hosts = DefaultHosts + "127.0.1.1\t" + spec.Hostname + "\n"
	}
	files := []struct {
		name string
		data []byte
	}{
		{ConfigFile, data},
		{HostnameFile, []byte(spec.Hostname + "\n")},
		{HostsFile, []byte(hosts)},
		{ResolvConfFile, []byte(s.ResolvConf)},
	}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(s.BundleDir, f.name), f.data, 0o644); err != nil {
			return fmt.Errorf("sandbox %q: write bundle: %w", s.ID, err)
		}
	}
	return nil
}

// ReadConfig reads the OCI spec of the bundle in dir.
func ReadConfig(dir string) (*specs.Spec, error) {
	data, err := os.ReadFile(filepath.Join(dir, ConfigFile))
	if err != nil {
		return nil, err
	}
	var spec specs.Spec
	if err := json.Unmarshal(data, &spec); err != nil {
		return nil, fmt.Errorf("bundle %s: %w", dir, err)
	}
	return &spec, nil
}

// WriteProcess writes p as a process.json for `exec --process` into the
// bundle's exec directory and returns its path; the caller removes it.
func WriteProcess(bundleDir string, p *specs.Process) (string, error) {
	dir := filepath.Join(bundleDir, execDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	f, err := os.CreateTemp(dir, "process-*.json")
	if err != nil {
		return "", err
	}
	if err := json.NewEncoder(f).Encode(p); err != nil {
		f.Close()
		os.Remove(f.Name())
		return "", err
	}
	if err := f.Close(); err != nil {
		os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
}
