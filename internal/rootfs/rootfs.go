// Package rootfs prepares sandbox root filesystems on a node.
//
// A template's root filesystem is a shared directory that no sandbox
// writes to (the template catalog unpacks it with internal/node/layer).
// Each sandbox gets its own writable layer with an enforced size: a
// sparse ext4 image file of DiskMB, attached to a loop device (with
// auto-clear, so the device goes away with its last mount) and mounted,
// holding the overlay's upper and work directories. The overlay of the
// shared tree and that layer, mounted at MergedDir(dir), is the root
// filesystem the runtime driver is given. When the layer is full its
// writer gets ENOSPC; the host's disk is not affected beyond the image's
// size.
//
// Layout of one layer directory (chosen by the caller, under Config.DataRoot):
//
//	<dir>/layer.json  what the layer is (sandbox ID, lower dir, size)
//	<dir>/layer.img   the sparse ext4 image: the sandbox's writable data
//	<dir>/layer/      the image's mount point: upper/ and work/
//	<dir>/rootfs/     the overlay: the sandbox's root filesystem
//
// Lifecycle of a layer directory:
//
//	      Prepare                Unmount
//	(none) ──────▶ mounted ──────────────▶ kept (image only)
//	                 ▲                        │
//	                 └──────── Remount ───────┘ (same dir, or a copy: fork)
//	mounted / kept ──── Destroy ───▶ (none)
package rootfs

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
)

// Config configures a Manager.
type Config struct {
	// DataRoot contains every layer directory. Prepare and Remount refuse
	// directories outside it, and the leak lister scans mounts and loop
	// devices below it.
	DataRoot string
	// Mkfs is the mkfs.ext4 binary (from e2fsprogs); default "mkfs.ext4"
	// looked up in PATH.
	Mkfs string
	// DetachWait bounds how long Unmount, Remount and Copy wait for a
	// layer's file system that outlives its mounts (see waitDetached);
	// default 15 s.
	DetachWait time.Duration
}

// Layer describes one sandbox's writable layer.
type Layer struct {
	SandboxID string // recorded in layer.json; leak reclaim keys on it
	Lower     string // the template's shared, read-only tree
	Dir       string // the layer directory, under Config.DataRoot
	DiskMB    int64  // free space of the writable layer (at least); must be positive
}

// Names inside a layer directory.
const (
	metaFile  = "layer.json"
	imageFile = "layer.img"
	layerDir  = "layer"
	mergedDir = "rootfs"
)

// MergedDir is the overlay mount point of layer directory dir: the sandbox's
// root filesystem.
func MergedDir(dir string) string { return filepath.Join(dir, mergedDir) }

// UpperDir is the overlay's upper directory of layer directory dir, on
// its image (while the layer is mounted): what the sandbox wrote.
func UpperDir(dir string) string { return filepath.Join(dir, layerDir, "upper") }

// ImagePath is the ext4 image of layer directory dir.
func ImagePath(dir string) string { return filepath.Join(dir, imageFile) }

// Leak is a host object under the data root whose sandbox is not kept.
type Leak struct {
	Kind      string // "mount" or "loop"
	Path      string // mount point, or loop device path
	SandboxID string // "" when no layer.json says
}

// meta is the content of layer.json.
type meta struct {
	Version   int    `json:"version"`
	SandboxID string `json:"sandboxId"`
	Lower     string `json:"lower"`
	DiskMB    int64  `json:"diskMB"`
}

const metaVersion = 1

// within reports whether path is root or below it (both cleaned, absolute).
func within(root, path string) bool {
	if root == "" {
		return false
	}
	rel, err := filepath.Rel(root, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../") && !filepath.IsAbs(rel)
}

// checkDir validates a layer directory path against the data root.
func (c Config) checkDir(dir string) (string, error) {
	if !filepath.IsAbs(dir) {
		return "", fmt.Errorf("layer dir %q: not absolute: %w", dir, errdefs.ErrInvalid)
	}
	dir = filepath.Clean(dir)
	if !within(c.DataRoot, dir) || dir == filepath.Clean(c.DataRoot) {
		return "", fmt.Errorf("layer dir %q: not under data root %q: %w", dir, c.DataRoot, errdefs.ErrInvalid)
	}
	return dir, nil
}

// overlayPathOK reports whether p can be named in overlay mount options.
func overlayPathOK(p string) bool { return !strings.ContainsAny(p, ",:\\\x00") }
