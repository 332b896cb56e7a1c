#!/usr/bin/env bash
# `make check`: the fast loop for a change that touches no host object.
# gofmt, go vet, staticcheck, then every unit test that needs neither root
# nor the host's objects (cgroups, netns, runsc, loop devices) nor a
# database server: WARREN_TEST_UNPRIVILEGED=1 skips those, and without
# WARREN_RUNSC, WARREN_TEST_POSTGRES_DSN and the root filesystem tars the
# tests that need them skip too. Go's test cache is kept, so a second run
# re-tests only the packages the change reached. `make test` stays the
# full run.
set -euo pipefail
cd "$(dirname "$0")/.."
staticcheck=${STATICCHECK:-bin/staticcheck}
echo "# gofmt"
unformatted=$("$(go env GOROOT)/bin/gofmt" -l $(git ls-files '*.go'))
if [ -n "$unformatted" ]; then
  echo "not gofmt'd: $unformatted" >&2
  exit 1
fi
echo "# go vet"
go vet ./...
go vet -tags e2e ./e2e/...
echo "# staticcheck"
"$staticcheck" ./...
echo "# unit tests (no root, no host objects, no database server)"
env -u CI -u WARREN_RUNSC -u WARREN_ENVD -u WARREN_WARREN -u WARREN_TEST_ROOTFS_TAR \
  -u WARREN_TEST_CODE_INTERPRETER_TAR -u WARREN_TEST_POSTGRES_DSN \
  WARREN_TEST_UNPRIVILEGED=1 go test -p 2 ./...
