#!/usr/bin/env bash
# Runs the test tiers this machine can run: unit and integration tests
# (root, real runsc/runc, real SQLite and Postgres), the fuzz targets, then
# the end-to-end tests with the real e2b npm SDK. `make test` runs them
# all; `scripts/test.sh unit|fuzz|e2e ...` (make test-unit, test-e2e) the
# ones named.
set -euo pipefail
cd "$(dirname "$0")/.."
tiers=${*:-unit fuzz e2e}
want() { [[ " $tiers " == *" $1 "* ]]; }

# (an assignment, so that a server that cannot start stops the run)
pg_env=$(scripts/start-postgres.sh "$PWD/var/pgdata" "${WARREN_TEST_PG_PORT:-55432}")
eval "$pg_env"
trap 'eval "$WARREN_TEST_POSTGRES_STOP" >/dev/null 2>&1 || true' EXIT

# The node's leak test runs the 100 create/kill cycles the runtime issue asks for.
export WARREN_TEST_CYCLES=${WARREN_TEST_CYCLES:-100}

# The real e2b SDK and CLI from npm: the end-to-end tests use them, and
# some unit tests compare with the SDK (cmd/warren's upload hash).
echo "== npm ci (e2e/)"
(cd e2e && npm ci --no-audit --no-fund --silent)

if want unit; then
  # kube-apiserver, kubectl and helm for the chart's test (deploy/helm),
  # built once per pinned version and cached (21 CPU-minutes when cold);
  # the assignment stops the run if a build fails.
  k8s_tools=$(scripts/k8s-tools.sh)
  eval "$k8s_tools"

  echo "== go test"
  go test -count=1 -timeout 40m -p 2 ./...
fi

if want fuzz; then
  # Every fuzz target of the parsers of tenant input, a few seconds each
  # (a longer run: FUZZTIME=10m make test-fuzz).
  echo "== fuzz"
  FUZZTIME=${FUZZTIME:-5s} scripts/fuzz.sh
fi

if want e2e; then
  echo "== e2e (real e2b SDK)"
  go test -count=1 -timeout 30m -tags e2e ./e2e/...
fi
