#!/usr/bin/env bash
# The vulnerability step of the lint tier: govulncheck over the module's
# packages, against a database built here from golang.org/x/vulndb (the Go
# vulnerability database's own source, pinned in tools/vuln/go.mod and
# fetched through the Go module proxy; vuln.go.dev is not reachable from
# every machine that runs this). tools/vuln/vulngate decides: a called
# vulnerable function, of a required module or of the standard library of
# the Go that builds (GOTOOLCHAIN in the Makefile), fails the step.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${BIN:-$PWD/bin}
version=$(cd tools/vuln && go list -m -f '{{.Version}}' golang.org/x/vulndb)
db=var/vulndb/$version
if [ ! -f "$db/index/db.json" ]; then
  echo "# vulndb $version: building the database"
  src=$(cd tools/vuln && go mod download -json "golang.org/x/vulndb@$version" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
  [ -d "$src/data/osv" ] || { echo "vulndb $version has no data/osv in '$src'" >&2; exit 1; }
  rm -rf "$db.tmp"
  "$bin/indexdb" -vulns "$src/data/osv" -out "$db.tmp"
  mv "$db.tmp" "$db"
fi
(cd tools/vuln && go test -count=1 ./vulngate)
echo "# govulncheck (database: golang.org/x/vulndb $version, $(go env GOVERSION))"
"$bin/govulncheck" -db "file://$PWD/$db" -format json ./... | "$bin/vulngate"
