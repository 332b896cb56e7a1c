#!/usr/bin/env bash
# Regenerates the Go code of envd's .proto files. Uses the system protoc
# (Debian's protobuf-compiler) and the plugins pinned as tools in the main
# go.mod (go tool protoc-gen-go, go tool protoc-gen-connect-go), so the
# output depends only on the repository and protoc's version.
set -euo pipefail
cd "$(dirname "$0")"
gen_go=$(go tool -n protoc-gen-go)
gen_connect=$(go tool -n protoc-gen-connect-go)
for f in process/process.proto filesystem/filesystem.proto; do
  protoc -I . \
    --plugin=protoc-gen-go="$gen_go" --go_out=. --go_opt=paths=source_relative \
    --plugin=protoc-gen-connect-go="$gen_connect" --connect-go_out=. --connect-go_opt=paths=source_relative \
    "$f"
done
