#!/usr/bin/env bash
# Installs what Warren needs on a Debian 12 host from Debian's packages.
# Idempotent: does nothing when every package is already installed.
set -euo pipefail
packages=(runc mmdebstrap nftables iproute2 postgresql protobuf-compiler e2fsprogs util-linux socat)
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
