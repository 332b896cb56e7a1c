// Command warren is Warren's single binary: `warren serve` runs the API,
// the node agent and the edge proxy in one process; `warren node` runs one
// machine's node agent for a separate control plane; `warren keys` manages
// API keys; `warren template` and `warren sandbox` are clients of a
// running server.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	var exit exitError
	switch {
	case errors.As(err, &exit): // `warren sandbox exec`: the command's own code
		os.Exit(exit.code)
	case err != nil:
		fmt.Fprintln(os.Stderr, "warren:", err)
		os.Exit(1)
	}
}
