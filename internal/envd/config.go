package envd

import (
	"fmt"
	"os"
	"time"

	"github.com/warren-sandbox/warren/internal/envdproto"
	"github.com/warren-sandbox/warren/internal/errdefs"
)

// DefaultPort is envd's port in every sandbox.
const DefaultPort = envdproto.Port

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
	// LogBytes bounds the sandbox's kept log (GET /logs; default 1 MiB).
	LogBytes int
	// TemplateEnv is the template's environment (envd's own, by default).
	TemplateEnv map[string]string
	// TrustStore is the PEM bundle file that /init's caBundle is appended
	// to; empty ignores caBundle. Defaults to Debian's system bundle when
	// envd is PID 1, empty otherwise (never touch a host's trust store).
	TrustStore string
}

// DefaultTrustStore is the system CA bundle of Debian-like images.
const DefaultTrustStore = "/etc/ssl/certs/ca-certificates.crt"

// DefaultConfig returns the defaults: 0.0.0.0:49983, port forwarding on,
// init mode when envd is PID 1.
func DefaultConfig() Config {
	c := Config{
		ListenAddr:    "0.0.0.0",
		Port:          DefaultPort,
		PortForward:   true,
		Init:          os.Getpid() == 1,
		ProcessRetain: time.Minute,
	}
	if c.Init {
		c.TrustStore = DefaultTrustStore
	}
	return c
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
