// Command envd is the daemon inside every Warren sandbox (see package
// internal/envd). It is built static (CGO_ENABLED=0) and started as the
// sandbox's init:
//
//	/.warren/envd --port 49983 --init-token-sha256 <hex>
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"syscall"

	"github.com/warren-sandbox/warren/internal/envd"
)

// The main goroutine keeps the main thread for the life of envd (the Go
// idiom for that needs init): no other goroutine runs there, so a
// goroutine that takes a user's identity on its own thread and ends with
// it never lands on the one thread that cannot end (process.killAs).
func init() { runtime.LockOSThread() }

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "envd:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	cfg := envd.DefaultConfig()
	fs := flag.NewFlagSet("envd", flag.ContinueOnError)
	fs.StringVar(&cfg.ListenAddr, "listen", cfg.ListenAddr, "address to listen on (without port)")
	fs.IntVar(&cfg.Port, "port", cfg.Port, "TCP port")
	fs.StringVar(&cfg.InitTokenSHA256, "init-token-sha256", "", "hex sha256 of the token the node must send to /init in X-Warren-Init-Token")
	noFwd := fs.Bool("no-port-forward", false, "do not forward loopback-only services to the sandbox's addresses")
	fs.DurationVar(&cfg.ProcessRetain, "process-retain", cfg.ProcessRetain, "how long an ended process stays attachable")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn, error")
	version := fs.Bool("version", false, "print the envd version and exit")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *version {
		fmt.Println(envd.Version)
		return nil
	}
	cfg.PortForward = !*noFwd
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return fmt.Errorf("log level %q: %w", *logLevel, err)
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	log.Info("envd starting", "version", envd.Version, "listen", cfg.ListenAddr, "port", cfg.Port,
		"init_token", cfg.InitTokenSHA256 != "", "port_forward", cfg.PortForward, "init", cfg.Init)
	srv, err := envd.New(cfg, log)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return srv.Run(ctx)
}
