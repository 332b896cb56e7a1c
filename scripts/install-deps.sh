#!/usr/bin/env bash
# Installs what Warren needs on a Debian 12 host from Debian's packages.
# Idempotent: does nothing when every package is already installed.
# scripts/check-deps.sh then checks each tool and file the Makefile and the
# tests use, naming the package of any that is still missing.
set -euo pipefail
# systemd's systemd-analyze checks the units in deploy/systemd.
# etcd-server is the store of the kube-apiserver the Helm chart's test
# starts (deploy/helm; scripts/k8s-tools.sh builds the rest).
# libprotobuf-dev has the well-known types (google/protobuf/*.proto) that
# the .proto files under api/ import; it is only a recommendation of
# protobuf-compiler, so it is named here.
packages=(runc mmdebstrap nftables iproute2 postgresql protobuf-compiler libprotobuf-dev
  e2fsprogs util-linux mount passwd python3 systemd etcd-server)
# Node.js for the e2e tests: Debian's, unless one is installed already
# (another build of nodejs brings its own npm, which Debian's npm conflicts with).
command -v node >/dev/null || packages+=(nodejs npm)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
