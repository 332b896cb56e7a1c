package app

import (
	"context"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warren-sandbox/warren/internal/apiserver"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/node"
)

// realNode builds the node agent over runsc or runc. It needs the host
// pieces (network slot pool, root filesystem layers) that the node
// engineers are still landing; until they are in the tree it says so.
func realNode(_ context.Context, cfg Config, _ prometheus.Registerer) (node.Service, apiserver.TemplateResolver, closer, error) {
	return nil, nil, nil, fmt.Errorf("driver %s: the network slot pool and root filesystem layers are not in this build yet; use --driver fake: %w", cfg.Driver, errdefs.ErrUnsupported)
}
