// Package sdke2e runs `warren serve` with the runsc driver end to end with
// the real E2B JS SDK and CLI (npm packages in e2e/node_modules), pointed
// at it through E2B_API_URL and E2B_SANDBOX_URL. The tests carry the build
// tag e2e; run them with `go test -tags e2e ./e2e/...` after `npm ci` in
// e2e/ and `make build base-rootfs`.
package sdke2e
