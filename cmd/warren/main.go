// Command warren is Warren's single binary: `warren serve` runs the API,
// the node agent and the edge proxy in one process; `warren keys` manages
// API keys.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "warren:", err)
		os.Exit(1)
	}
}
