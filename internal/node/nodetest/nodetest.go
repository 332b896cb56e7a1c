// Package nodetest gives tests of the node agent and of its callers the
// in-memory host pieces of internal/node/memhost under their test names.
// The warren binary must not link it (see internal/nodeapi's deps test).
package nodetest

import "github.com/warren-sandbox/warren/internal/node/memhost"

// The pieces (see memhost).
type (
	Net      = memhost.Net
	Cgroups  = memhost.Cgroups
	Cgroup   = memhost.Cgroup
	Layers   = memhost.Layers
	Layer    = memhost.Layer
	Envd     = memhost.Envd
	EnvdCall = memhost.EnvdCall
)

// Constructors of the pieces.
var (
	NewNet     = memhost.NewNet
	NewCgroups = memhost.NewCgroups
	NewLayers  = memhost.NewLayers
)
