package main

import (
	"io"
	"log/slog"

	"github.com/spf13/pflag"

	"github.com/warren-sandbox/warren/internal/app"
)

// processFlagSet are the flags of every role (`warren serve`, `warren api`,
// `warren node`) that configure the process rather than the role: the
// log level and the egress exceptions.
type processFlagSet struct {
	logLevel    string
	egressAllow []string
}

// processFlags defines p's flags on f.
func processFlags(f *pflag.FlagSet, p *processFlagSet) {
	f.StringArrayVar(&p.egressAllow, "egress-allow", nil, "let image pulls and webhook deliveries reach this non-public destination: CIDR, IP, IP:PORT or HOST:PORT (repeatable; by default only public addresses are reached)")
	f.StringVar(&p.logLevel, "log-level", "info", "log level: debug, info, warn, error")
}

// options are the app.Options of p: the logger of --log-level on stderr,
// the output on stdout.
func (p *processFlagSet) options(stdout, stderr io.Writer) (app.Options, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(p.logLevel)); err != nil {
		return app.Options{}, err
	}
	return app.Options{Logger: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lvl})), Out: stdout, EgressAllow: p.egressAllow}, nil
}
