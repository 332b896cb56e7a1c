//go:build !linux

package nodebuild

// xattrs reads no extended attributes off Linux.
func xattrs(string) (map[string]string, error) { return nil, nil }
