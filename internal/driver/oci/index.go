package oci

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/warren-sandbox/warren/internal/driver"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/sandbox"
)

// Record is what an OCI driver remembers of one sandbox on disk, so that a
// restarted node agent can list it, find its bundle and delete it even after
// the runtime forgot it (a checkpointed sandbox is deleted from the runtime
// at once).
type Record struct {
	Version     int         `json:"version"`
	ID          string      `json:"id"`
	BundleDir   string      `json:"bundle_dir"`
	CgroupsPath string      `json:"cgroups_path"`
	Stopped     bool        `json:"stopped,omitempty"` // checkpointed: gone from the runtime
	Exit        driver.Exit `json:"exit"`              // set when Stopped
}

// recordVersion is the version of Record written by this code.
const recordVersion = 1

// Index keeps one Record file per sandbox in Dir.
type Index struct{ Dir string }

func (x Index) path(id string) string { return filepath.Join(x.Dir, id+".json") }

// Put writes r atomically.
func (x Index) Put(r Record) error {
	if !sandbox.ValidID(r.ID) {
		return fmt.Errorf("sandbox %q: bad ID: %w", r.ID, errdefs.ErrInvalid)
	}
	r.Version = recordVersion
	if err := os.MkdirAll(x.Dir, 0o700); err != nil {
		return fmt.Errorf("sandbox %q: index: %w", r.ID, err)
	}
	data, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("sandbox %q: index: %w", r.ID, err)
	}
	tmp := x.path(r.ID) + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("sandbox %q: index: %w", r.ID, err)
	}
	if err := os.Rename(tmp, x.path(r.ID)); err != nil {
		return fmt.Errorf("sandbox %q: index: %w", r.ID, err)
	}
	return nil
}

// Get reads the record of id; errdefs.ErrNotFound if there is none.
func (x Index) Get(id string) (Record, error) {
	if !sandbox.ValidID(id) {
		return Record{}, fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
	}
	data, err := os.ReadFile(x.path(id))
	if errors.Is(err, os.ErrNotExist) {
		return Record{}, fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
	}
	if err != nil {
		return Record{}, fmt.Errorf("sandbox %q: index: %w", id, err)
	}
	var r Record
	if err := json.Unmarshal(data, &r); err != nil {
		return Record{}, fmt.Errorf("sandbox %q: index: %w", id, err)
	}
	if r.Version > recordVersion {
		return Record{}, fmt.Errorf("sandbox %q: index record version %d is newer than %d: %w", id, r.Version, recordVersion, errdefs.ErrUnsupported)
	}
	return r, nil
}

// Remove deletes the record of id; a missing record is not an error.
func (x Index) Remove(id string) error {
	if err := os.Remove(x.path(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("sandbox %q: index: %w", id, err)
	}
	return nil
}

// IDs lists the sandboxes with a record.
func (x Index) IDs() ([]string, error) {
	ents, err := os.ReadDir(x.Dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("index %s: %w", x.Dir, err)
	}
	var ids []string
	for _, e := range ents {
		if id, ok := strings.CutSuffix(e.Name(), ".json"); ok && sandbox.ValidID(id) {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// MergeIDs returns the sorted union of a and b.
func MergeIDs(a, b []string) []string {
	out := append(slices.Clone(a), b...)
	slices.Sort(out)
	return slices.Compact(out)
}
