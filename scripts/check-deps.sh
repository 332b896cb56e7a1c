#!/usr/bin/env bash
# Checks that every tool and file `make run` and `make test` use is on this
# machine, and names the Debian package (or other source) of each one that
# is missing. Run by `make deps` after scripts/install-deps.sh.
set -uo pipefail
missing=0
need() { # need WHAT SOURCE: WHAT is a command name or an absolute path
  local what=$1 source=$2
  if [[ $what == /* ]]; then compgen -G "$what" >/dev/null && return; else command -v "$what" >/dev/null && return; fi
  echo "missing: $what (install $source)" >&2
  missing=1
}
# Building, generating and the e2e tests.
need go "Go $(sed -n 's/^go //p' "$(dirname "$0")/../go.mod") or newer from go.dev, on PATH"
need node "Debian package nodejs"
need npm "Debian package npm"
need protoc "Debian package protobuf-compiler"
need /usr/include/google/protobuf/timestamp.proto "Debian package libprotobuf-dev"
# The runtime and the base template.
need runc "Debian package runc"
need mmdebstrap "Debian package mmdebstrap"
need nft "Debian package nftables"
need ip "Debian package iproute2"
need mkfs.ext4 "Debian package e2fsprogs"
need unshare "Debian package util-linux"
need losetup "Debian package mount"
need tar "Debian package tar"
need chroot "Debian package coreutils"
need useradd "Debian package passwd"
need ldd "Debian package libc-bin"
need python3 "Debian package python3"
# The tests' database server.
need '/usr/lib/postgresql/*/bin/initdb' "Debian package postgresql"
need runuser "Debian package util-linux"
# The Helm chart's test: etcd behind its kube-apiserver (which, with helm
# and kubectl, scripts/k8s-tools.sh builds), flock for that script.
need etcd "Debian package etcd-server"
need flock "Debian package util-linux"
need sha256sum "Debian package coreutils"
# The systemd units' test (deploy/systemd).
need systemd-analyze "Debian package systemd"
# The e2e tests' domain mode: glibc resolves *.localhost to loopback
# (libnss-myhostname, named on the hosts line of /etc/nsswitch.conf).
need '/usr/lib/*/libnss_myhostname.so.2' "Debian package libnss-myhostname"
if ! getent ahostsv4 api.e2b.localhost 2>/dev/null | grep -q '^127\.0\.0\.1 '; then
  echo "missing: resolution of *.localhost names (add myhostname to the hosts line of /etc/nsswitch.conf; scripts/install-deps.sh does)" >&2
  missing=1
fi
if [ "$missing" -ne 0 ]; then
  echo "run scripts/install-deps.sh as root, or install the above" >&2
  exit 1
fi
