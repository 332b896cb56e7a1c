//go:build !linux

package doctor

import (
	"context"
	"runtime"
)

func checks(c *Config) []check {
	return []check{func(ctx context.Context, c *Config) Result {
		return fail("platform", "the node agent runs on Linux only; this is "+runtime.GOOS, "run the node agent on a Linux host")
	}}
}
