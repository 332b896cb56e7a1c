#!/usr/bin/env bash
# Writes the root filesystem of Warren's `code-interpreter-v1` system
# template as a tar file, from Debian's packages (mmdebstrap), with no
# container registry and no PyPI: the base template's packages and set-up,
# Jupyter's kernel and client, the usual data packages, Node.js, and the
# code interpreter server (images/code-interpreter) in
# /opt/warren/code-interpreter.
# Usage: scripts/build-code-interpreter-rootfs.sh OUT.tar
set -euo pipefail
out=${1:?usage: $0 OUT.tar}
mirror=${WARREN_DEBIAN_MIRROR:-http://deb.debian.org/debian}
src=$(cd "$(dirname "$0")/../images/code-interpreter" && pwd)
tmp="$out.tmp.$$"
trap 'rm -f "$tmp"' EXIT
base=bash,python3,python-is-python3,python3-pip,python3-venv,git,curl,sudo,ca-certificates,procps,iproute2,less,nano
interp=python3-ipykernel,python3-jupyter-client,python3-matplotlib,python3-matplotlib-inline,python3-pandas,python3-numpy,python3-scipy,python3-seaborn,python3-requests,python3-openpyxl,python3-pil,nodejs,fonts-dejavu-core
# python3-matplotlib needs python3-fonttools, which in Debian 12 needs
# python3-scipy and so pythran, g++ and Boost's headers (about 500 MB):
# they stay (dpkg stays consistent); manuals, docs and translations go.
mmdebstrap --format=tar --variant=minbase --include="$base,$interp" \
  --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
  --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
  --customize-hook='chroot "$1" useradd --create-home --shell /bin/bash --uid 1000 user' \
  --customize-hook='echo "user ALL=(ALL:ALL) NOPASSWD: ALL" > "$1/etc/sudoers.d/user" && chmod 0440 "$1/etc/sudoers.d/user"' \
  --customize-hook='rm -f "$1/etc/hostname" "$1/etc/resolv.conf"; : > "$1/etc/resolv.conf"' \
  --customize-hook='sed -i -e "1i # Warren: a login shell keeps the PATH it was started with (the ENV PATH of a template) unless it has relative entries.\nwarren_path=\${PATH-}\ncase \":\$warren_path:\" in *:.:*|*::*) warren_path= ;; esac" -e "0,/^export PATH\$/s//if [ -n \"\$warren_path\" ]; then PATH=\$warren_path; fi; unset warren_path\nexport PATH/" "$1/etc/profile"' \
  --customize-hook="mkdir -p \"\$1/opt/warren/code-interpreter\" && cp -r '$src'/. \"\$1/opt/warren/code-interpreter/\" && chmod -R a+rX \"\$1/opt/warren\"" \
  --customize-hook='rm -rf "$1/var/cache/apt/archives"/*.deb "$1/var/lib/apt/lists"/*_Packages' \
  bookworm "$tmp" "$mirror"
mv "$tmp" "$out"
trap - EXIT
