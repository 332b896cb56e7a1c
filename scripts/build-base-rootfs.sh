#!/usr/bin/env bash
# Writes the root filesystem of Warren's default `base` template as a tar
# file, from Debian's packages (mmdebstrap), with no container registry.
# Usage: scripts/build-base-rootfs.sh OUT.tar
set -euo pipefail
out=${1:?usage: $0 OUT.tar}
mirror=${WARREN_DEBIAN_MIRROR:-http://deb.debian.org/debian}
tmp="$out.tmp.$$"
trap 'rm -f "$tmp"' EXIT
packages=bash,python3,python-is-python3,python3-pip,python3-venv,git,curl,sudo,ca-certificates,procps,iproute2,less,nano
mmdebstrap --format=tar --variant=minbase --include="$packages" \
  --customize-hook='chroot "$1" useradd --create-home --shell /bin/bash --uid 1000 user' \
  --customize-hook='echo "user ALL=(ALL:ALL) NOPASSWD: ALL" > "$1/etc/sudoers.d/user" && chmod 0440 "$1/etc/sudoers.d/user"' \
  --customize-hook='rm -f "$1/etc/hostname" "$1/etc/resolv.conf"; : > "$1/etc/resolv.conf"' \
  --customize-hook='sed -i -e "1i # Warren: a login shell keeps the PATH it was started with (the ENV PATH of a template) unless it has relative entries.\nwarren_path=\${PATH-}\ncase \":\$warren_path:\" in *:.:*|*::*) warren_path= ;; esac" -e "0,/^export PATH\$/s//if [ -n \"\$warren_path\" ]; then PATH=\$warren_path; fi; unset warren_path\nexport PATH/" "$1/etc/profile"' \
  bookworm "$tmp" "$mirror"
mv "$tmp" "$out"
trap - EXIT
