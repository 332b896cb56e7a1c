#!/usr/bin/env bash
# Installs what Warren needs on a Debian 12 host from Debian's packages.
# Idempotent: does nothing when every package is already installed (and
# nsswitch.conf already names myhostname, see the end).
# scripts/check-deps.sh then checks each tool and file the Makefile and the
# tests use, naming the package of any that is still missing.
set -euo pipefail
# systemd's systemd-analyze checks the units in deploy/systemd.
# etcd-server is the store of the kube-apiserver the Helm chart's test
# starts (deploy/helm; scripts/k8s-tools.sh builds the rest).
# libprotobuf-dev has the well-known types (google/protobuf/*.proto) that
# the .proto files under api/ import; it is only a recommendation of
# protobuf-compiler, so it is named here.
# libnss-myhostname lets glibc resolve every *.localhost name to loopback:
# the e2e tests' domain mode (e2e/compat TestDomainMode) reaches
# api.e2b.localhost and <port>-<id>.e2b.localhost through it.
packages=(runc mmdebstrap nftables iproute2 postgresql protobuf-compiler libprotobuf-dev
  e2fsprogs util-linux mount passwd python3 systemd etcd-server libnss-myhostname)
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

# The module works only when named on the hosts line of nsswitch.conf.
# Debian's package puts it there when it is installed; where it is missing
# (a line edited since), it goes right after "files" (or first), and the
# rest of the line (dns, ...) stays as it was.
nss=/etc/nsswitch.conf
if [ -f "$nss" ] && ! grep -Eq '^hosts:.*[[:space:]]myhostname([[:space:]]|$)' "$nss"; then
  if grep -Eq '^hosts:[[:space:]]+files([[:space:]]|$)' "$nss"; then
    sed -i -E 's/^(hosts:[[:space:]]+files)([[:space:]]|$)/\1 myhostname\2/' "$nss"
  else
    sed -i -E 's/^(hosts:[[:space:]]+)/\1myhostname /' "$nss"
  fi
  echo "added myhostname to the hosts line of $nss: $(grep -E '^hosts:' "$nss")"
fi
