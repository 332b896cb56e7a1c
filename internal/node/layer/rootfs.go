package layer

import (
	"context"
	"io"
)

// UnpackRootFS unpacks the operator's own root filesystem tar (the base
// template's, a system template's) from r into the existing directory
// dir: Unpack with the tar's device nodes kept, progress (when set)
// receiving the bytes of file content written so far. The template
// catalog unpacks with it (templates.Config.UnpackRootFS).
func UnpackRootFS(ctx context.Context, r io.Reader, dir string, progress func(written int64)) error {
	return Unpack(ctx, r, dir, Options{Devices: true, Progress: progress})
}
