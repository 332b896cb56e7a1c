package files

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/warren-sandbox/warren/internal/envd/identity"
	"github.com/warren-sandbox/warren/internal/errdefs"
)

// A signed upload URL grants one path (docs/security.md, "Signed URLs").
// A raw body goes to that path. A multipart body may carry one file part,
// which goes to that path whatever its file name, unless the name is
// itself a path (it has a "/" or starts with "~") that resolves elsewhere.
// Parts come one after another on the wire, so the file is staged until
// the body has ended: a second file part, or a part naming another path,
// is refused with 403 and nothing is written (the signed path keeps what
// it had).

// msgSignedNoPath answers a write on a URL signed for no path (the SDK's
// uploadUrl() without a path), which upstream lets write any file name.
const msgSignedNoPath = "a signed upload URL writes only the path it was signed for, and this one was signed for no path: sign it for the file's path"

// errSignedPath marks the refusals of the one-path rule.
var errSignedPath = errors.New("signed path")

func refuseSigned(format string, args ...any) error {
	return fmt.Errorf("%w: %w", errdefs.Publicf(errdefs.ErrForbidden, format, args...), errSignedPath)
}

// uploadSigned writes the one file of a multipart body to target, the
// resolved path the URL was signed for.
func uploadSigned(u *identity.User, body io.Reader, boundary, target string, md map[string]string) ([]uploaded, error) {
	if boundary == "" {
		return nil, errdefs.Classf(errdefs.ErrInvalid, "multipart body without boundary")
	}
	mr := multipart.NewReader(body, boundary)
	var staged *os.File
	defer func() {
		if staged != nil {
			_ = staged.Close() // unlinked: closing frees it
		}
	}()
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, errdefs.Classf(errdefs.ErrInvalid, "multipart body: %v", err)
		}
		name := rawFilename(part.Header.Get("Content-Disposition"))
		if name == "" && part.FormName() != "file" {
			_ = part.Close()
			continue
		}
		if staged != nil {
			return nil, refuseSigned("a signed URL writes only the path it was signed for ('%s'): the upload has a second file; nothing was written", target)
		}
		if namesPath(name) && u.ResolvePath(name, "") != target {
			return nil, refuseSigned("a signed URL writes only the path it was signed for ('%s'): the file part names '%s'; nothing was written", target, name)
		}
		if staged, err = stagingFile(target); err != nil {
			return nil, err
		}
		buf := make([]byte, 256<<10)
		_, err = io.CopyBuffer(onlyWriter{staged}, onlyReader{part}, buf)
		_ = part.Close()
		if err != nil {
			return nil, fmt.Errorf("write '%s': %w", target, err)
		}
	}
	if staged == nil {
		return nil, nil // "no file in the request"
	}
	if _, err := staged.Seek(0, io.SeekStart); err != nil {
		return nil, fmt.Errorf("write '%s': %w", target, err)
	}
	e, err := writeFile(u, target, staged, md)
	if err != nil {
		return nil, err
	}
	return []uploaded{e}, nil
}

// namesPath reports whether a part's file name is a path rather than the
// bare name a browser or curl sends.
func namesPath(name string) bool {
	return strings.ContainsRune(name, '/') || strings.HasPrefix(name, "~")
}

// stagingFile returns an unlinked file, open for reading and writing, in
// the nearest existing directory above target (so, mostly, on its file
// system and under its quota). Being unlinked, it is never seen and never
// left behind, even if envd dies.
func stagingFile(target string) (*os.File, error) {
	dir := filepath.Dir(target)
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	for err != nil && errors.Is(err, unix.ENOENT) && dir != "/" {
		dir = filepath.Dir(dir)
		fd, err = unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	}
	if err != nil {
		return nil, fmt.Errorf("staging the upload of '%s': %w", target, classify(err))
	}
	defer unix.Close(fd)
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	name := ".warren-upload-" + hex.EncodeToString(rnd[:])
	f, err := unix.Openat(fd, name, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("staging the upload of '%s': %w", target, classify(err))
	}
	if err := unix.Unlinkat(fd, name, 0); err != nil {
		unix.Close(f)
		return nil, fmt.Errorf("staging the upload of '%s': %w", target, classify(err))
	}
	return os.NewFile(uintptr(f), filepath.Join(dir, name)), nil
}
