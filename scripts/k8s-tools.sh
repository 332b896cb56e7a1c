#!/usr/bin/env bash
# Builds the Kubernetes tools the chart test (deploy/helm) uses, once per
# pinned version, and prints the environment that points the test at them:
#
#   eval "$(scripts/k8s-tools.sh)"
#
# kube-apiserver and kubectl come from k8s.io/kubernetes as pinned in
# tools/kube/go.mod (with its staging modules replaced by the published
# ones of the same release), helm from helm.sh/helm/v3 as pinned in
# tools/helm/go.mod, both through the Go module proxy. etcd is Debian's
# etcd-server (scripts/install-deps.sh).
#
# The binaries are kept in WARREN_K8S_CACHE (default ~/.cache/warren-k8s),
# in a directory named by the version and a hash of the pins: a cold build
# takes 21 CPU-minutes (about 11 minutes on two idle cores), a warm run a
# fraction of a second. Progress goes to
# stderr; stdout carries only the exports.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cache=${WARREN_K8S_CACHE:-$HOME/.cache/warren-k8s}
mkdir -p "$cache"
export CGO_ENABLED=0
# The machine's Go, whatever the Makefile pins for Warren's own code: these
# are test tools, cached by their pins alone.
export GOTOOLCHAIN=local

# pinkey DIR: a short hash of DIR's go.mod and go.sum, so that a change of
# pin builds anew instead of reusing an older binary.
pinkey() { cat "$1/go.mod" "$1/go.sum" | sha256sum | cut -c1-12; }

# modversion DIR MODULE: MODULE's version as DIR's go.mod requires it.
modversion() { (cd "$1" && go list -m -f '{{.Version}}' "$2"); }

# build NAME DIR LDFLAGS PKG...: builds PKG... of DIR's module into
# $cache/NAME-VERSION-KEY/ unless it is there already; prints that directory.
build() {
  local name=$1 dir=$2 ldflags=$3 version=$4
  shift 4
  local out="$cache/$name-$version-$(pinkey "$dir")"
  if [ ! -f "$out/.complete" ]; then
    # One build at a time per cache, whoever else runs this script.
    exec 9>"$cache/.lock"
    flock 9
    if [ ! -f "$out/.complete" ]; then
      echo "k8s-tools: building $name $version into $out (minutes, once)" >&2
      local start=$SECONDS tmp
      tmp=$(mktemp -d "$cache/.build-$name.XXXXXX")
      (cd "$dir" && go build -trimpath -ldflags "-s -w $ldflags" -o "$tmp/" "$@") >&2
      touch "$tmp/.complete"
      rm -rf "$out"
      mv "$tmp" "$out"
      echo "k8s-tools: built $name in $((SECONDS - start))s" >&2
    fi
    exec 9>&-
  fi
  echo "$out"
}

kube_dir="$root/tools/kube"
kube_version=$(modversion "$kube_dir" k8s.io/kubernetes)
kube_minor=$(echo "$kube_version" | cut -d. -f2)
kube=$(build kube "$kube_dir" \
  "-X k8s.io/component-base/version.gitVersion=$kube_version -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$kube_minor -X k8s.io/client-go/pkg/version.gitVersion=$kube_version -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=$kube_minor" \
  "$kube_version" k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kubectl)

helm_dir="$root/tools/helm"
helm_version=$(modversion "$helm_dir" helm.sh/helm/v3)
# helm lint and helm template assume a Kubernetes of its client-go's minor.
helm_kube_minor=$(modversion "$helm_dir" k8s.io/client-go | cut -d. -f2)
helm=$(build helm "$helm_dir" \
  "-X helm.sh/helm/v3/internal/version.version=$helm_version -X helm.sh/helm/v3/internal/version.gitTreeState=clean -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$helm_kube_minor -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$helm_kube_minor" \
  "$helm_version" helm.sh/helm/v3/cmd/helm)

etcd=$(command -v etcd || true)
[ -n "$etcd" ] || echo "k8s-tools: etcd is missing (Debian package etcd-server: scripts/install-deps.sh)" >&2

printf 'export WARREN_KUBE_APISERVER=%q WARREN_KUBECTL=%q WARREN_HELM=%q WARREN_ETCD=%q\n' \
  "$kube/kube-apiserver" "$kube/kubectl" "$helm/helm" "$etcd"
