//go:build !linux

package builder

import (
	"io/fs"
	"path/filepath"
)

// freedBytes adds up the sizes of the files below dir (no link counts
// off Linux).
func freedBytes(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// usedBytes adds up the sizes of the files below dirs (no inodes off
// Linux: hard links count each time).
func usedBytes(dirs ...string) int64 {
	var n int64
	for _, dir := range dirs {
		n += freedBytes(dir)
	}
	return n
}
