package oci

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
)

// RuntimeLogFile is the file in the bundle that receives the sandbox's
// stdio and the runtime's messages when the spec names no Log.
const RuntimeLogFile = "runtime.log"

// OpenLog returns the file to hand to a detached runtime as the sandbox's
// stdout and stderr, writing to w:
//   - nil w: <bundleDir>/runtime.log (so that a failing runtime's message
//     can be read back with LogTail);
//   - an *os.File: w itself. Open it with O_APPEND: gVisor writes to a
//     donated regular file at its own offsets, so without O_APPEND lines
//     from the sandbox overwrite earlier ones;
//   - any other writer: the write end of a pipe, with a goroutine copying
//     the read end into w until every holder of the write end closed it.
//
// The file must be a real file, never a pipe os/exec copies from: a
// detached sandbox inherits it and keeps it open for its whole life. The
// caller passes f to the runtime and then calls release.
func OpenLog(bundleDir string, w io.Writer) (f *os.File, release func(), err error) {
	switch w := w.(type) {
	case nil:
		f, err := os.OpenFile(filepath.Join(bundleDir, RuntimeLogFile), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			return nil, nil, err
		}
		return f, func() { f.Close() }, nil
	case *os.File:
		return w, func() {}, nil
	}
	r, pw, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	go func() {
		_, _ = io.Copy(w, r)
		r.Close()
	}()
	return pw, func() { pw.Close() }, nil
}

// LogTail returns the last lines of <bundleDir>/runtime.log when the spec
// had no Log of its own (where the runtime's error message went), or a
// pointer to the caller's log.
func LogTail(bundleDir string, w io.Writer) string {
	if w != nil {
		return "see the sandbox log"
	}
	data, err := os.ReadFile(filepath.Join(bundleDir, RuntimeLogFile))
	if err != nil {
		return ""
	}
	data = bytes.TrimSpace(data)
	if len(data) > 2000 {
		data = data[len(data)-2000:]
	}
	return string(data)
}

// CapLog bounds <bundleDir>/runtime.log, where a sandbox's init writes
// (a tenant can write there without end): once the file is larger than
// max it keeps only its last max/4 bytes, after a marker line. Writers
// hold the file with O_APPEND (OpenLog), so they go on at the new end.
// It reports whether it cut the file; a missing file is no error.
func CapLog(bundleDir string, max int64) (bool, error) {
	p := filepath.Join(bundleDir, RuntimeLogFile)
	fi, err := os.Stat(p)
	if errors.Is(err, os.ErrNotExist) || err == nil && fi.Size() <= max {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	f, err := os.OpenFile(p, os.O_RDWR|os.O_APPEND, 0)
	if err != nil {
		return false, err
	}
	defer f.Close()
	keep := max / 4
	tail := make([]byte, keep)
	n, err := f.ReadAt(tail, fi.Size()-keep)
	if err != nil && !errors.Is(err, io.EOF) {
		return false, err
	}
	if err := f.Truncate(0); err != nil {
		return false, err
	}
	if _, err := f.Write(append([]byte("[warren: earlier output dropped: the log exceeded its size cap]\n"), tail[:n]...)); err != nil {
		return false, err
	}
	return true, nil
}
