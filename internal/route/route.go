// Package route is the contract between the edge proxy and what routes
// its traffic (lifecycle.Manager.Route): where a sandbox's traffic goes,
// what is known of the sandbox before it is woken, and the errors a route
// ends in. The proxy imports this package only, not the lifecycle or the
// store.
package route

import (
	"context"
	"errors"
)

// Router finds where a sandbox's traffic goes.
type Router interface {
	// Route calls admit before it resumes a paused sandbox, and returns
	// admit's error as is.
	Route(ctx context.Context, sandboxID string, admit func(*Admission) error) (*Route, error)
}

// Route is where the edge proxy sends a sandbox's traffic.
type Route struct {
	SandboxID string
	TeamID    string
	// Address is envd's host:port; Host is where the other ports are.
	Address            string
	Host               string
	EnvdAccessToken    string
	TrafficAccessToken string
	// Woken is set when the sandbox was paused as the request came: its
	// ports may take a moment to answer.
	Woken bool
	// Epoch is the sandbox's epoch on its node (nodeapi.Sandbox.Epoch),
	// which a resume or restart changes: connections pooled in an older
	// one are not reused.
	Epoch int64
	// MaskRequestHost replaces the Host header of requests to the
	// sandbox's own ports ("${PORT}" is the port); HTTPSPorts are spoken
	// to over TLS (network.maskRequestHost, network.httpsPorts).
	MaskRequestHost string
	HTTPSPorts      []int
	// NodeProxy, when set, is the proxy listener of the sandbox's node
	// (nodeapi.Sandbox.NodeProxy): Address and Host are reachable from
	// that node only. NodeID is that node (whose credential the hop
	// carries).
	NodeProxy string
	NodeID    string
}

// ErrPaused is returned (wrapped with ErrConflict) by a Router for a paused
// sandbox that does not allow auto-resume.
var ErrPaused = errors.New("sandbox is paused")

// Admission is what a Router knows of a sandbox before it routes: its access
// tokens and whether a request would wake it. The proxy decides from it
// whether the request may go on.
type Admission struct {
	SandboxID          string
	EnvdAccessToken    string
	TrafficAccessToken string
	// Paused is set for a paused (or pausing) sandbox; CanAutoResume when
	// traffic would resume it.
	Paused        bool
	CanAutoResume bool
}
