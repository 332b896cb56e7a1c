#!/usr/bin/env bash
# Fails when the generated code under api/ is stale: regenerates it into a
# scratch copy and compares.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -d api ] || exit 0
before=$(mktemp -d); trap 'rm -rf "$before"' EXIT
cp -a api/. "$before/"
scripts/generate.sh
if ! diff -r "$before" api >/dev/null; then
  diff -r "$before" api | head -40
  echo "generated code under api/ is stale: run 'make generate' and commit the result" >&2
  exit 1
fi
