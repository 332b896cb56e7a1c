package node

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/warren-sandbox/warren/internal/atomicfile"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/netslot"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/sandbox"
)

// recordVersion is the version of the per-sandbox state record this agent
// writes. Records of a newer version are left alone (with everything they
// own) by an older agent.
const recordVersion = 1

const recordFile = "state.json"

// record is the persisted state of one sandbox, written atomically at every
// state change to <DataDir>/sandboxes/sbx-<id>/state.json (mode 0600: it
// holds the envd tokens).
type record struct {
	Version     int               `json:"version"`
	ID          string            `json:"id"`
	ExecutionID string            `json:"executionId"`
	TeamID      string            `json:"teamId,omitempty"`
	Template    nodeapi.Template  `json:"template"`
	State       sandbox.State     `json:"state"`
	Epoch       int64             `json:"epoch"`
	StartedAt   time.Time         `json:"startedAt"`
	EndAt       time.Time         `json:"endAt"`
	Resources   sandbox.Resources `json:"resources"`
	// GuestMemoryMB is the memory the guest was first booted with when it
	// differs from Resources.MemoryMB (a pool member claimed with more);
	// see driver.Spec.GuestMemoryMB. 0: Resources.MemoryMB.
	GuestMemoryMB int64             `json:"guestMemoryMB,omitempty"`
	Network       netslot.Policy    `json:"network"`
	EnvVars       map[string]string `json:"envVars,omitempty"`
	Metadata      map[string]string `json:"metadata,omitempty"`
	// Volumes are the sandbox's volume mounts (volumes.go).
	Volumes     []nodeapi.VolumeMount `json:"volumes,omitempty"`
	EnvdVersion string                `json:"envdVersion"`
	// AccessToken is the envd access token given by the control plane.
	AccessToken string `json:"accessToken,omitempty"`
	// InitToken authenticates the agent's /init calls; its SHA-256 is on
	// envd's command line, so a restored image keeps expecting it.
	InitToken string `json:"initToken"`
	// Slot is the network slot while running, or while paused keeping
	// its host objects (keep.go).
	Slot *netslot.Slot `json:"slot,omitempty"`
	// Cgroup is the cgroup name while running (or paused keeping it).
	Cgroup string `json:"cgroup,omitempty"`
	// RootFS is the merged root directory while running (or paused
	// keeping its mount).
	RootFS string `json:"rootfs,omitempty"`
	// PausedWithMemory is set while paused with a memory image in
	// <dir>/snapshot.
	PausedWithMemory bool `json:"pausedWithMemory,omitempty"`
	// Internal marks the agent's own temporary sandbox (a template
	// snapshot's), which no restart keeps.
	Internal bool `json:"internal,omitempty"`
}

// sandboxesDir is where the per-sandbox directories live.
func sandboxesDir(dataDir string) string { return filepath.Join(dataDir, "sandboxes") }

// sandboxDir is sandbox id's directory.
func sandboxDir(dataDir, id string) string {
	return filepath.Join(sandboxesDir(dataDir), sandbox.HostName(id))
}

// writeRecord writes r into dir atomically (temporary file, fsync, rename).
func writeRecord(dir string, r *record) error {
	r.Version = recordVersion
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("sandbox %q: encode state: %w", r.ID, err)
	}
	if err := atomicfile.Write(filepath.Join(dir, recordFile), b, 0o600); err != nil {
		return fmt.Errorf("sandbox %q: write state: %w", r.ID, err)
	}
	return nil
}

// errNewerRecord marks a record written by a newer agent.
var errNewerRecord = errors.New("state record of a newer version")

// readRecord reads the record in dir. A missing file is ErrNotFound; a
// record of a newer version is errNewerRecord (and ErrUnsupported).
func readRecord(dir string) (*record, error) {
	b, err := os.ReadFile(filepath.Join(dir, recordFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("state record in %s: %w", dir, errdefs.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("state record in %s: %w", dir, err)
	}
	var v struct {
		Version int `json:"version"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, fmt.Errorf("state record in %s: %w: %v", dir, errdefs.ErrInvalid, err)
	}
	if v.Version > recordVersion {
		return nil, fmt.Errorf("state record in %s: version %d: %w (%w)", dir, v.Version, errNewerRecord, errdefs.ErrUnsupported)
	}
	if v.Version < 1 {
		return nil, fmt.Errorf("state record in %s: version %d: %w", dir, v.Version, errdefs.ErrInvalid)
	}
	var r record
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("state record in %s: %w: %v", dir, errdefs.ErrInvalid, err)
	}
	if !sandbox.ValidID(r.ID) || filepath.Base(dir) != sandbox.HostName(r.ID) {
		return nil, fmt.Errorf("state record in %s: sandbox id %q does not match its directory: %w", dir, r.ID, errdefs.ErrInvalid)
	}
	return &r, nil
}
