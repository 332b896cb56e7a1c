package builder

import (
	"io/fs"
	"path/filepath"
	"syscall"
)

// freedBytes is the disk space removing dir frees: the blocks of every
// directory and of every inode whose links all lie below dir (a tree's
// files hard-linked into the layer cache or another template's tree stay).
func freedBytes(dir string) int64 {
	type inode struct {
		links, seen uint64
		bytes       int64
	}
	inodes := map[[2]uint64]*inode{}
	var n int64
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return nil
		}
		if d.IsDir() {
			n += st.Blocks * 512
			return nil
		}
		k := [2]uint64{uint64(st.Dev), st.Ino}
		in := inodes[k]
		if in == nil {
			in = &inode{links: uint64(st.Nlink), bytes: st.Blocks * 512}
			inodes[k] = in
		}
		in.seen++
		return nil
	})
	for _, in := range inodes {
		if in.seen >= in.links {
			n += in.bytes
		}
	}
	return n
}

// usedBytes is the disk space the trees below dirs take together: the
// blocks of every directory and of every inode, each inode once however
// many links to it the trees hold (a template's tree hard-links the
// layer cache entries it was flattened from).
func usedBytes(dirs ...string) int64 {
	seen := map[[2]uint64]bool{}
	var n int64
	for _, dir := range dirs {
		filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			fi, err := d.Info()
			if err != nil {
				return nil
			}
			st, ok := fi.Sys().(*syscall.Stat_t)
			if !ok {
				return nil
			}
			k := [2]uint64{uint64(st.Dev), st.Ino}
			if !seen[k] {
				seen[k] = true
				n += st.Blocks * 512
			}
			return nil
		})
	}
	return n
}
