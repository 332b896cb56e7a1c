#!/usr/bin/env bash
# Regenerates the Go code for the node agent's .proto. Uses the system protoc
# (Debian's protobuf-compiler, which also provides the well-known types) and
# the plugins pinned as tools in go.mod.
set -euo pipefail
cd "$(dirname "$0")"
root=$(cd ../.. && pwd)
bindir=$(mktemp -d); trap 'rm -rf "$bindir"' EXIT
(cd "$root" && go build -o "$bindir/protoc-gen-go" google.golang.org/protobuf/cmd/protoc-gen-go \
  && go build -o "$bindir/protoc-gen-connect-go" connectrpc.com/connect/cmd/protoc-gen-connect-go)
PATH="$bindir:$PATH" protoc -I . -I /usr/include \
  --go_out=. --go_opt=paths=source_relative \
  --connect-go_out=. --connect-go_opt=paths=source_relative \
  node.proto build.proto
