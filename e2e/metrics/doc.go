// Package metricse2e runs `warren serve` with the runsc driver end to end
// with the real E2B JS SDK (e2e/node_modules) and checks that a sandbox's
// getMetrics() returns CPU, memory and disk samples within 30 s of its
// create. The tests carry the build tag e2e; run them with
// `go test -tags e2e ./e2e/metrics/` after `npm ci` in e2e/ and
// `make build base-rootfs`, as root, with WARREN_WARREN, WARREN_RUNSC,
// WARREN_ENVD and WARREN_TEST_ROOTFS_TAR set.
package metricse2e
