//go:build !linux

package builder

import (
	"context"
	"fmt"

	"github.com/warren-sandbox/warren/internal/errdefs"
)

func (b *Builder) sizedScratch(ctx context.Context, dir string, mb int64) (string, func() error, error) {
	return "", nil, fmt.Errorf("build scratch needs Linux: %w", errdefs.ErrUnsupported)
}

func copyOut(ctx context.Context, src, dst string) error {
	return fmt.Errorf("build scratch needs Linux: %w", errdefs.ErrUnsupported)
}

func full(string) bool { return false }
