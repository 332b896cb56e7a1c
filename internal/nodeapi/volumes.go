package nodeapi

import (
	"context"
	"io"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
)

// Volumes (docs/volumes.md): a volume is a file system of a fixed size on
// one node's disk, of one team, named by its ID on every wire (the node
// keeps it under its own data directory; no path of the host crosses).
// The node mounts a sandbox's volumes when it starts or resumes it
// (CreateRequest.Volumes) and serves their content without a sandbox
// (VolumeService). Paths inside a volume are resolved inside it by the
// kernel: ".." stops at the volume's root, and a symbolic link that
// leaves the volume is refused.

// VolumeMount asks for volume ID at Path in a sandbox (an absolute path
// the control plane checked).
type VolumeMount struct {
	ID   string
	Path string
}

// MaxVolumeMounts bounds the volumes of one sandbox.
const MaxVolumeMounts = 16

// reservedMountPaths are the paths of a sandbox's own mounts: a volume
// may not be mounted at one of them, or at or below the first group.
var (
	reservedTrees = []string{"/proc", "/sys", "/dev", "/.warren"}
	reservedPaths = []string{"/", "/tmp", "/etc", "/etc/hosts", "/etc/hostname", "/etc/resolv.conf"}
)

// CheckVolumeMounts checks the paths of a sandbox's volume mounts:
// absolute, clean, not one of the sandbox's own mount points, none at or
// below another, at most MaxVolumeMounts. The control plane checks them
// before it places a create, the node again before it mounts.
func CheckVolumeMounts(mounts []VolumeMount) error {
	if len(mounts) > MaxVolumeMounts {
		return errdefs.Publicf(errdefs.ErrInvalid, "volumeMounts: at most %d volumes, got %d", MaxVolumeMounts, len(mounts))
	}
	for i, m := range mounts {
		p := m.Path
		switch {
		case m.ID == "":
			return errdefs.Publicf(errdefs.ErrInvalid, "volumeMounts: the mount at %q names no volume", p)
		case !path.IsAbs(p) || path.Clean(p) != p || len(p) > 255 || strings.ContainsAny(p, ",:\x00"):
			return errdefs.Publicf(errdefs.ErrInvalid, "volumeMounts: path %q must be an absolute, clean path", p)
		case slices.Contains(reservedPaths, p):
			return errdefs.Publicf(errdefs.ErrInvalid, "volumeMounts: path %q is one of the sandbox's own mounts", p)
		}
		for _, r := range reservedTrees {
			if p == r || strings.HasPrefix(p, r+"/") {
				return errdefs.Publicf(errdefs.ErrInvalid, "volumeMounts: path %q is under the sandbox's own %s", p, r)
			}
		}
		for _, o := range mounts[:i] {
			if o.Path == p || strings.HasPrefix(p, o.Path+"/") || strings.HasPrefix(o.Path, p+"/") {
				return errdefs.Publicf(errdefs.ErrInvalid, "volumeMounts: paths %q and %q overlap", o.Path, p)
			}
		}
	}
	return nil
}

// VolumeSpec describes a volume to create.
type VolumeSpec struct {
	ID     string
	TeamID string
	// SizeMB is the space the volume holds, at least: a write past it
	// gets ENOSPC inside a sandbox (ErrExhausted through VolumeService).
	SizeMB int64
}

// VolumeEntryType is the kind of a volume's entry, as E2B names it.
type VolumeEntryType string

// Entry types.
const (
	VolumeFile      VolumeEntryType = "file"
	VolumeDirectory VolumeEntryType = "directory"
	VolumeSymlink   VolumeEntryType = "symlink"
	VolumeUnknown   VolumeEntryType = "unknown"
)

// VolumeEntry describes one file, directory or symbolic link of a volume
// (E2B's VolumeEntryStat). Path is absolute within the volume ("/" is its
// root); Target is a symbolic link's target, as written.
type VolumeEntry struct {
	Name   string
	Path   string
	Type   VolumeEntryType
	Size   int64
	Mode   uint32 // permission bits (and setuid, setgid, sticky)
	UID    uint32
	GID    uint32
	Atime  time.Time
	Mtime  time.Time
	Ctime  time.Time
	Target string
}

// VolumeFileOptions tune MakeDir and WriteFile: the owner and mode of
// what they make (nil: the parent directory's owner, mode 0755 for a
// directory and 0644 for a file), and Force: for MakeDir, make missing
// parents (and take an existing directory as made); for WriteFile,
// replace an existing file.
type VolumeFileOptions struct {
	UID, GID *uint32
	Mode     *uint32
	Force    bool
}

// VolumeMetadata is what SetVolumeMetadata changes (nil: unchanged).
type VolumeMetadata struct {
	UID, GID *uint32
	Mode     *uint32
}

// VolumeService is the optional part of Service for volumes. Every call
// names the volume's team; a volume of another team is ErrNotFound, as
// one the node does not hold. The agent's node (internal/node/volumes)
// and the RPC client implement it.
type VolumeService interface {
	// CreateVolume makes volume spec.ID; ErrAlreadyExists when the node
	// holds it, ErrExhausted when its disk has no room for spec.SizeMB.
	CreateVolume(ctx context.Context, spec VolumeSpec) error
	// DeleteVolume deletes a volume and everything in it; ErrConflict
	// while a sandbox of the node (running or paused) mounts it or a
	// content call is in flight.
	DeleteVolume(ctx context.Context, teamID, id string) error
	// StatVolumePath describes the entry at path (a symbolic link itself,
	// not its target).
	StatVolumePath(ctx context.Context, teamID, id, path string) (*VolumeEntry, error)
	// ListVolumeDir lists directory path, depth levels deep (1: its
	// entries only).
	ListVolumeDir(ctx context.Context, teamID, id, path string, depth int) ([]VolumeEntry, error)
	// MakeVolumeDir makes directory path; without opts.Force its parent
	// must exist (ErrNotFound) and path must not (ErrAlreadyExists).
	MakeVolumeDir(ctx context.Context, teamID, id, path string, opts VolumeFileOptions) (*VolumeEntry, error)
	// SetVolumeMetadata changes the owner or mode of path.
	SetVolumeMetadata(ctx context.Context, teamID, id, path string, md VolumeMetadata) (*VolumeEntry, error)
	// RemoveVolumePath removes path, a directory with everything in it.
	RemoveVolumePath(ctx context.Context, teamID, id, path string) error
	// ReadVolumeFile opens regular file path for reading; the caller
	// closes the reader.
	ReadVolumeFile(ctx context.Context, teamID, id, path string) (io.ReadCloser, *VolumeEntry, error)
	// WriteVolumeFile writes r to file path, whole or not at all: what a
	// reader sees of path is its old content until the new one is on
	// disk (synced), then the new one. Its parent must exist; an existing
	// file is replaced only with opts.Force (ErrAlreadyExists). A volume
	// that cannot hold it is ErrExhausted.
	WriteVolumeFile(ctx context.Context, teamID, id, path string, opts VolumeFileOptions, r io.Reader) (*VolumeEntry, error)
}
