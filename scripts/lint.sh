#!/usr/bin/env bash
# The lint tier of `make test`: gofmt, go vet under every build tag and
# platform the tree has (linux, the e2e tag, darwin for the CLI and the Go
# client), staticcheck (pinned in tools/staticcheck/go.mod, configured by
# staticcheck.conf) and govulncheck (scripts/vulncheck.sh). Fails on the
# first finding. `lint.sh --no-vuln` (make check) leaves govulncheck out:
# its database is built from golang.org/x/vulndb, which takes a while.
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
GOOS=darwin go vet ./cmd/warren/... ./pkg/...
echo "# staticcheck"
"$staticcheck" ./...
"$staticcheck" -tags e2e ./e2e/...
if [ "${1:-}" != --no-vuln ]; then
  echo "# govulncheck"
  scripts/vulncheck.sh
fi
