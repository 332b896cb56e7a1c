# Warren — see README.md. `make run` and `make test` do all set-up on a
# fresh Debian 12 machine (as root).
SHELL := /bin/bash
GO ?= go
export CGO_ENABLED := 0
# Everything make builds and tests uses the Go of go.mod's `toolchain`
# line (1.27.3), which the go command fetches once from the Go module proxy
# (about 76 MB): the machine's Go (1.26.8 on Debian 12 here) has
# standard-library vulnerabilities that Warren's code calls (net/http,
# crypto/tls, crypto/x509; the lint tier's govulncheck lists them). In the
# repository's root a plain `go build` picks the same toolchain from
# go.mod; the tool modules under tools/ get it from here. The Kubernetes
# test tools are built with the machine's Go (scripts/k8s-tools.sh).
export GOTOOLCHAIN := $(shell sed -n 's/^toolchain //p' go.mod)

BIN := $(CURDIR)/bin
VAR := $(CURDIR)/var
BASE_ROOTFS := $(VAR)/base-rootfs.tar
CODE_INTERPRETER_ROOTFS := $(VAR)/code-interpreter-rootfs.tar
MCP_GATEWAY_ROOTFS := $(VAR)/mcp-gateway-rootfs.tar

# Paths the tests read; a test whose prerequisite is missing skips locally
# and fails under CI=true.
export WARREN_RUNSC := $(BIN)/runsc
export WARREN_ENVD := $(BIN)/envd
export WARREN_WARREN := $(BIN)/warren
export WARREN_TEST_ROOTFS_TAR := $(BASE_ROOTFS)
export WARREN_TEST_CODE_INTERPRETER_TAR := $(CODE_INTERPRETER_ROOTFS)
export WARREN_TEST_MCP_GATEWAY_TAR := $(MCP_GATEWAY_ROOTFS)

.PHONY: all deps build run check test test-unit test-e2e test-fuzz generate check-generate lint base-rootfs code-interpreter-rootfs mcp-gateway-rootfs clean

all: build

deps:
	scripts/install-deps.sh
	scripts/check-deps.sh

build: $(BIN)/warren $(BIN)/envd $(BIN)/runsc $(BIN)/mcp-gateway

$(BIN)/warren: FORCE
	$(GO) build -o $@ ./cmd/warren

$(BIN)/envd: FORCE
	$(GO) build -ldflags="-s -w" -o $@ ./cmd/envd

# The MCP gateway of the mcp-gateway template (static): remade only when
# its sources change, and with it the template's root filesystem.
MCP_GATEWAY_SRC := $(shell find cmd/mcp-gateway internal/mcpgateway -type f ! -name '*_test.go') go.mod go.sum
$(BIN)/mcp-gateway: $(MCP_GATEWAY_SRC)
	$(GO) build -ldflags="-s -w" -o $@ ./cmd/mcp-gateway

# runsc is pinned in tools/runsc/go.mod (a tool directive) and built static.
$(BIN)/runsc: tools/runsc/go.mod tools/runsc/go.sum
	cd tools/runsc && $(GO) build -ldflags="-s -w" -o $@ gvisor.dev/gvisor/runsc

# staticcheck is pinned in tools/staticcheck/go.mod, for the lint tier.
$(BIN)/staticcheck: tools/staticcheck/go.mod tools/staticcheck/go.sum Makefile
	cd tools/staticcheck && $(GO) build -o $@ honnef.co/go/tools/cmd/staticcheck

# govulncheck, the database indexer of golang.org/x/vulndb and the verdict
# filter are pinned in tools/vuln/go.mod, for the lint tier (scripts/vulncheck.sh).
VULN_TOOLS := $(BIN)/govulncheck $(BIN)/indexdb $(BIN)/vulngate
$(BIN)/govulncheck: tools/vuln/go.mod tools/vuln/go.sum Makefile
	cd tools/vuln && $(GO) build -o $@ golang.org/x/vuln/cmd/govulncheck
$(BIN)/indexdb: tools/vuln/go.mod tools/vuln/go.sum
	cd tools/vuln && $(GO) build -o $@ golang.org/x/vulndb/cmd/indexdb
$(BIN)/vulngate: tools/vuln/go.mod tools/vuln/go.sum tools/vuln/vulngate/main.go
	cd tools/vuln && $(GO) build -o $@ ./vulngate

base-rootfs: $(BASE_ROOTFS)

$(BASE_ROOTFS): scripts/build-base-rootfs.sh | $(VAR)/go.mod
	scripts/build-base-rootfs.sh $@

# The code-interpreter-v1 template's root filesystem: remade only when its
# script or server changed (about 10 minutes of mmdebstrap, 1.4 GB).
code-interpreter-rootfs: $(CODE_INTERPRETER_ROOTFS)

$(CODE_INTERPRETER_ROOTFS): scripts/build-code-interpreter-rootfs.sh $(wildcard images/code-interpreter/*) | $(VAR)/go.mod
	scripts/build-code-interpreter-rootfs.sh $@

# The mcp-gateway template's root filesystem: the code interpreter's tar
# with the gateway, npm and the catalog's servers appended (about a
# minute, most of it npm; its downloads are cached in ~/.cache/warren-npm).
mcp-gateway-rootfs: $(MCP_GATEWAY_ROOTFS)

$(MCP_GATEWAY_ROOTFS): scripts/build-mcp-gateway-rootfs.sh $(CODE_INTERPRETER_ROOTFS) $(BIN)/mcp-gateway | $(VAR)/go.mod
	scripts/build-mcp-gateway-rootfs.sh $@ $(CODE_INTERPRETER_ROOTFS) $(BIN)/mcp-gateway

# var/ holds root filesystems whose trees contain .go files (Debian's docs):
# a go.mod of its own keeps them out of `go test ./...` and `go vet ./...`.
$(VAR)/go.mod:
	mkdir -p $(VAR)
	printf 'module warren.invalid/var\n' > $@

generate:
	scripts/generate.sh

check-generate:
	scripts/check-generate.sh

lint: $(BIN)/staticcheck $(VULN_TOOLS)
	scripts/lint.sh

run: deps build code-interpreter-rootfs mcp-gateway-rootfs | $(VAR)/go.mod
	$(BIN)/warren serve --data-dir $(VAR)/data $(ARGS)

# The fast loop for a change that touches no host object: gofmt, vet,
# staticcheck and the unit tests that need no root, no runsc and no
# database server (a few minutes on two cores; scripts/check.sh).
check: $(BIN)/staticcheck | $(VAR)/go.mod
	scripts/check.sh

# The full run: every tier this machine can run. test-unit is its Go
# tests (root, runsc, SQLite and Postgres), test-e2e its end-to-end tests
# with the real e2b SDK.
test: deps build base-rootfs code-interpreter-rootfs mcp-gateway-rootfs check-generate lint | $(VAR)/go.mod
	scripts/test.sh

test-unit: deps build base-rootfs code-interpreter-rootfs mcp-gateway-rootfs | $(VAR)/go.mod
	scripts/test.sh unit

test-e2e: deps build base-rootfs code-interpreter-rootfs mcp-gateway-rootfs | $(VAR)/go.mod
	scripts/test.sh e2e

# Fuzz targets of the parsers of tenant input, FUZZTIME (default 5s) each.
test-fuzz:
	scripts/fuzz.sh

clean:
	rm -rf $(BIN)

FORCE:
