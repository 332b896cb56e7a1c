//go:build !linux

package main

import (
	"errors"
	"os"
)

// termSize: terminals are only driven on Linux.
func termSize(*os.File) (cols, rows uint32, ok bool) { return 0, 0, false }

func makeRaw(*os.File) (func(), error) {
	return nil, errors.New("raw terminal mode: unsupported on this platform")
}
