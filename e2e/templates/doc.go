// Package templatese2e runs `warren serve` with the runsc driver end to
// end with the real E2B JS SDK (e2e/node_modules): Template.build() of a
// template with COPY, RUN, ENV, a start and a ready command, sandboxes
// from it, and sandbox snapshots. The tests carry the build tag e2e; run
// them with `go test -tags e2e ./e2e/templates/` after `npm ci` in e2e/ and
// `make build base-rootfs`, as root, with WARREN_WARREN, WARREN_RUNSC,
// WARREN_ENVD and WARREN_TEST_ROOTFS_TAR set.
package templatese2e
