// Package atomicfile replaces files so that a reader, or a process that
// restarts after a crash, sees the old contents or the new ones, never a
// mix: the data goes to a temporary file, is synced, and the file is
// renamed over the target, whose directory is then synced.
package atomicfile

import (
	"os"
	"path/filepath"
)

// Write replaces path with data, with mode perm, through a temporary file
// in path's directory.
func Write(path string, data []byte, perm os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	if err := f.Chmod(perm); err != nil {
		f.Close()
		os.Remove(f.Name())
		return err
	}
	return Commit(f, data, path)
}

// Commit writes data to f, a new temporary file on path's file system
// (another directory is fine, e.g. a scratch directory whose leftovers a
// crash clean-up removes), syncs and closes it, and renames it to path. f
// is removed if anything fails.
func Commit(f *os.File, data []byte, path string) error {
	tmp := f.Name()
	defer os.Remove(tmp) // no-op after the rename
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
