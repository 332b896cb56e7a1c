#!/usr/bin/env bash
# Runs every fuzz target of the parsers of tenant input for a bounded time
# each (FUZZTIME, default 5s): the Dockerfile parser and step expansion,
# the build API's step JSON, COPY source resolution inside the build
# context, tar/gzip unpacking, path resolution inside a root. A crash fails
# the script; go test leaves the input in the package's
# testdata/fuzz/<target>/, which then stays there as a regression seed
# (commit it with the fix).
set -euo pipefail
cd "$(dirname "$0")/.."
FUZZTIME=${FUZZTIME:-5s}
targets=(
	./internal/builder:FuzzParseDockerfile
	./internal/builder:FuzzStepJSON
	./internal/builder:FuzzSourceMatches
	./internal/node/layer:FuzzUnpack
	./internal/node/layer:FuzzResolveInRoot
)
for t in "${targets[@]}"; do
	pkg=${t%%:*} name=${t##*:}
	echo "# fuzz $name ($pkg, $FUZZTIME)"
	go test -run '^$' -fuzz "^${name}\$" -fuzztime "$FUZZTIME" "$pkg"
done
