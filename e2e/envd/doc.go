// Package envde2e runs envd end to end with the real E2B JS SDK (npm
// package e2b, in e2e/node_modules) in debug mode: the SDK then talks to
// http://localhost:49983, so each test starts the built envd
// ($WARREN_ENVD) on port 49983 inside a network namespace of its own and
// runs the SDK scripts (*.mjs) in that namespace. The tests carry the
// build tag e2e; run them with `go test -tags e2e ./e2e/...` after
// `npm ci` in e2e/.
package envde2e
