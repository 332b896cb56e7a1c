//go:build !linux

package volumes

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/nodeapi"
)

var errUnsupported = fmt.Errorf("volumes: %w on this platform", errdefs.ErrUnsupported)

type host struct{}

func newHost(string, time.Duration) (host, error)           { return host{}, errUnsupported }
func (host) imageBytes(int64) int64                         { return 0 }
func (host) makeImage(context.Context, string, int64) error { return errUnsupported }
func (host) mount(context.Context, string, string) error    { return errUnsupported }
func (host) unmount(context.Context, string) error          { return errUnsupported }
func freeDisk(string) (uint64, error)                       { return 0, errUnsupported }
func openDir(string) (*os.File, error)                      { return nil, errUnsupported }
func syncDir(string) error                                  { return errUnsupported }

// StatVolumePath implements nodeapi.VolumeService (Linux only).
func (m *Manager) StatVolumePath(context.Context, string, string, string) (*nodeapi.VolumeEntry, error) {
	return nil, errUnsupported
}

// ListVolumeDir implements nodeapi.VolumeService (Linux only).
func (m *Manager) ListVolumeDir(context.Context, string, string, string, int) ([]nodeapi.VolumeEntry, error) {
	return nil, errUnsupported
}

// MakeVolumeDir implements nodeapi.VolumeService (Linux only).
func (m *Manager) MakeVolumeDir(context.Context, string, string, string, nodeapi.VolumeFileOptions) (*nodeapi.VolumeEntry, error) {
	return nil, errUnsupported
}

// SetVolumeMetadata implements nodeapi.VolumeService (Linux only).
func (m *Manager) SetVolumeMetadata(context.Context, string, string, string, nodeapi.VolumeMetadata) (*nodeapi.VolumeEntry, error) {
	return nil, errUnsupported
}

// RemoveVolumePath implements nodeapi.VolumeService (Linux only).
func (m *Manager) RemoveVolumePath(context.Context, string, string, string) error {
	return errUnsupported
}

// ReadVolumeFile implements nodeapi.VolumeService (Linux only).
func (m *Manager) ReadVolumeFile(context.Context, string, string, string) (io.ReadCloser, *nodeapi.VolumeEntry, error) {
	return nil, nil, errUnsupported
}

// WriteVolumeFile implements nodeapi.VolumeService (Linux only).
func (m *Manager) WriteVolumeFile(context.Context, string, string, string, nodeapi.VolumeFileOptions, io.Reader) (*nodeapi.VolumeEntry, error) {
	return nil, errUnsupported
}
