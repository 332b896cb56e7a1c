// Package filesystem implements envd's filesystem.Filesystem Connect
// service: stat, list, make directories, move, remove, and watch, acting as
// the selected user (see package identity for how paths resolve and how
// access is checked).
package filesystem

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	pb "github.com/warren-sandbox/warren/api/envd/filesystem"
	"github.com/warren-sandbox/warren/api/envd/filesystem/filesystemconnect"
	"github.com/warren-sandbox/warren/internal/envd/auth"
	"github.com/warren-sandbox/warren/internal/envd/identity"
	"github.com/warren-sandbox/warren/internal/envd/state"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/errdefs/errconnect"
)

// Service is the filesystem.Filesystem handler.
type Service struct {
	log      *slog.Logger
	auth     *auth.Auth
	state    *state.State
	watchers *watcherSet
}

var _ filesystemconnect.FilesystemHandler = (*Service)(nil)

// NewService returns the service.
func NewService(log *slog.Logger, a *auth.Auth, st *state.State) *Service {
	return &Service{log: log, auth: a, state: st, watchers: newWatcherSet()}
}

// Handler returns the mount path and HTTP handler of the service.
func (s *Service) Handler(opts ...connect.HandlerOption) (string, http.Handler) {
	return filesystemconnect.NewFilesystemHandler(s, opts...)
}

// Close stops every polling watcher.
func (s *Service) Close() { s.watchers.closeAll() }

// userPath resolves the request's user and a path against the user's home.
func (s *Service) userPath(h http.Header, p string) (*identity.User, string, error) {
	u, err := s.auth.User(auth.BasicUser(h))
	if err != nil {
		return nil, "", err
	}
	return u, u.ResolvePath(p, ""), nil
}

// Stat describes one entry.
func (s *Service) Stat(_ context.Context, req *connect.Request[pb.StatRequest]) (*connect.Response[pb.StatResponse], error) {
	u, path, err := s.userPath(req.Header(), req.Msg.GetPath())
	if err != nil {
		return nil, errconnect.From(err)
	}
	if err := u.CheckAccess(filepath.Dir(path), identity.Execute); err != nil {
		return nil, errconnect.From(err)
	}
	e, err := Entry(path)
	if err != nil {
		return nil, errconnect.From(err)
	}
	return connect.NewResponse(&pb.StatResponse{Entry: e}), nil
}

// MakeDir creates a directory and its parents, as root on the user's
// behalf; what it creates belongs to the user.
func (s *Service) MakeDir(_ context.Context, req *connect.Request[pb.MakeDirRequest]) (*connect.Response[pb.MakeDirResponse], error) {
	u, path, err := s.userPath(req.Header(), req.Msg.GetPath())
	if err != nil {
		return nil, errconnect.From(err)
	}
	if err := u.Mkdir(path); err != nil {
		return nil, errconnect.From(err)
	}
	e, err := Entry(path)
	if err != nil {
		return nil, errconnect.From(err)
	}
	return connect.NewResponse(&pb.MakeDirResponse{Entry: e}), nil
}

// Move renames an entry, creating the destination's parents (owned by the
// user), as root on the user's behalf.
func (s *Service) Move(_ context.Context, req *connect.Request[pb.MoveRequest]) (*connect.Response[pb.MoveResponse], error) {
	u, src, err := s.userPath(req.Header(), req.Msg.GetSource())
	if err != nil {
		return nil, errconnect.From(err)
	}
	dst := u.ResolvePath(req.Msg.GetDestination(), "")
	if _, err := os.Lstat(src); err != nil {
		return nil, errconnect.From(statErr(src, err))
	}
	if _, err := u.MkdirAll(filepath.Dir(dst)); err != nil {
		return nil, errconnect.From(err)
	}
	if err := os.Rename(src, dst); err != nil {
		return nil, errconnect.From(fmt.Errorf("move %s to %s: %w", src, dst, classify(err)))
	}
	e, err := Entry(dst)
	if err != nil {
		return nil, errconnect.From(err)
	}
	return connect.NewResponse(&pb.MoveResponse{Entry: e}), nil
}

// Remove removes a file or a directory tree, as root on the user's
// behalf. A missing path is not an error.
func (s *Service) Remove(_ context.Context, req *connect.Request[pb.RemoveRequest]) (*connect.Response[pb.RemoveResponse], error) {
	_, path, err := s.userPath(req.Header(), req.Msg.GetPath())
	if err != nil {
		return nil, errconnect.From(err)
	}
	if err := os.RemoveAll(path); err != nil {
		return nil, errconnect.From(fmt.Errorf("remove %s: %w", path, classify(err)))
	}
	return connect.NewResponse(&pb.RemoveResponse{}), nil
}

// ListDir lists a directory down to the requested depth (at least 1):
// a depth-first walk in lexical order of the names in each directory, a
// directory before what is below it (upstream's filepath.WalkDir order,
// which the SDK's tests compare entry by entry). Symbolic links are
// listed, not followed.
func (s *Service) ListDir(_ context.Context, req *connect.Request[pb.ListDirRequest]) (*connect.Response[pb.ListDirResponse], error) {
	u, path, err := s.userPath(req.Header(), req.Msg.GetPath())
	if err != nil {
		return nil, errconnect.From(err)
	}
	dir, err := u.Open(path, unix.O_RDONLY|unix.O_DIRECTORY, identity.Read|identity.Execute)
	if err != nil {
		if errdefs.IsInvalid(err) {
			return nil, errconnect.From(errdefs.Classf(errdefs.ErrInvalid, "path is not a directory: %s", path))
		}
		return nil, errconnect.From(err)
	}
	defer dir.Close()
	depth := int(req.Msg.GetDepth())
	if depth < 1 {
		depth = 1
	}
	resp := &pb.ListDirResponse{}
	if err := list(u, dir, path, depth, &resp.Entries); err != nil {
		return nil, errconnect.From(err)
	}
	return connect.NewResponse(resp), nil
}

// list appends the entries of the open directory f, named path, sorted
// by name, each followed (down to depth) by those of the directory it is
// when the user may list that (opened and checked as Open does).
func list(u *identity.User, f *os.File, path string, depth int, out *[]*pb.EntryInfo) error {
	des, err := f.ReadDir(-1) // in the file system's order
	if err != nil {
		return fmt.Errorf("list %s: %w", path, classify(err))
	}
	slices.SortFunc(des, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	for _, de := range des {
		p := filepath.Join(path, de.Name())
		info, err := de.Info()
		if err != nil {
			continue // removed meanwhile
		}
		*out = append(*out, entryFromInfo(p, info))
		if depth > 1 && de.IsDir() {
			if sub, err := u.Open(p, unix.O_RDONLY|unix.O_DIRECTORY, identity.Read|identity.Execute); err == nil {
				_ = list(u, sub, p, depth-1, out)
				sub.Close()
			}
		}
	}
	return nil
}

// classify wraps an OS error in its class.
func classify(err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return errdefs.Classf(errdefs.ErrNotFound, "%w", err)
	case errors.Is(err, fs.ErrPermission):
		return errdefs.Classf(errdefs.ErrForbidden, "%w", err)
	case errors.Is(err, fs.ErrExist):
		return errdefs.Classf(errdefs.ErrAlreadyExists, "%w", err)
	default:
		return err
	}
}
