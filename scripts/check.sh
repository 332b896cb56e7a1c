#!/usr/bin/env bash
# `make check`: the fast loop for a change that touches no host object.
# The lint tier without govulncheck (gofmt, go vet, staticcheck), then
# every unit test that needs neither root nor the host's objects (cgroups,
# netns, runsc, loop devices) nor a database server:
# WARREN_TEST_UNPRIVILEGED=1 skips those, and without WARREN_RUNSC,
# WARREN_TEST_POSTGRES_DSN and the root filesystem tars the tests that
# need them skip too. Go's test cache is kept, so a second run re-tests
# only the packages the change reached. `make test` stays the full run.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/lint.sh --no-vuln
echo "# unit tests (no root, no host objects, no database server)"
env -u CI -u WARREN_RUNSC -u WARREN_ENVD -u WARREN_WARREN -u WARREN_TEST_ROOTFS_TAR \
  -u WARREN_TEST_CODE_INTERPRETER_TAR -u WARREN_TEST_MCP_GATEWAY_TAR -u WARREN_TEST_POSTGRES_DSN \
  WARREN_TEST_UNPRIVILEGED=1 go test -p 2 ./...
