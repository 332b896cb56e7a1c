package serve

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warren-sandbox/warren/internal/app"
	"github.com/warren-sandbox/warren/internal/app/noderole"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/testenv"
)

// fakeNode opens the fake driver's node in dir, as warren serve does,
// and returns it, its templates, the registry of its metrics and a
// function that closes it.
func fakeNode(ctx context.Context, t *testing.T, dir string) (nodeapi.Service, noderole.Resolver, *prometheus.Registry, func(), error) {
	t.Helper()
	sys, err := app.New(app.Options{Logger: testenv.Logger(t)})
	if err != nil {
		return nil, nil, nil, nil, err
	}
	n, err := noderole.Open(ctx, sys, noderole.Host{Driver: "fake", DataDir: dir})
	if err != nil {
		sys.Close()
		return nil, nil, nil, nil, err
	}
	return n.Service, n.Templates, sys.Registry, func() { sys.Close() }, nil
}
