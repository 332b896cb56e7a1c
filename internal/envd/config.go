package envd

import (
	"fmt"
	"os"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
)

// DefaultPort is envd's port in every sandbox.
const DefaultPort = 49983

// Config is envd's configuration; DefaultConfig gives the defaults.
type Config struct {
	// ListenAddr is the address to listen on, without port.
	ListenAddr string
	// Port is the TCP port.
	Port int
	// InitTokenSHA256 is the hex sha256 of the node's /init token; empty
	// applies upstream's rule (see the package doc).
	InitTokenSHA256 string
	// PortForward forwards loopback-only services to the sandbox's other
	// addresses.
	PortForward bool
	// Init makes envd reap every child (it is PID 1) and lets /init set
	// the clock.
	Init bool
	// ProcessRetain is how long an ended process stays attachable.
	ProcessRetain time.Duration
	// TemplateEnv is the template's environment (envd's own, by default).
	TemplateEnv map[string]string
}

// DefaultConfig returns the defaults: 0.0.0.0:49983, port forwarding on,
// init mode when envd is PID 1.
func DefaultConfig() Config {
	return Config{
		ListenAddr:    "0.0.0.0",
		Port:          DefaultPort,
		PortForward:   true,
		Init:          os.Getpid() == 1,
		ProcessRetain: time.Minute,
	}
}

// Validate checks the configuration.
func (c Config) Validate() error {
	if c.Port <= 0 || c.Port > 65535 {
		return fmt.Errorf("port %d: %w", c.Port, errdefs.ErrInvalid)
	}
	if c.ProcessRetain < 0 {
		return fmt.Errorf("process retain %s: %w", c.ProcessRetain, errdefs.ErrInvalid)
	}
	return nil
}
